// Fuzzes the statement classifier (pooler/sql/statement_classifier.h) with arbitrary SQL text:
// neither the cheap first-word check nor PostgreSQL's parser may crash, and the check must never
// wave through a statement that the parser says changes the session: a false alarm costs one
// parse, a miss would leave a client's SET or temporary table behind on a shared server.
#include <cstdint>
#include <string_view>

#include "pooler/sql/statement_classifier.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view sql(reinterpret_cast<const char*>(data), size);
  if (sql.find('\0') != std::string_view::npos) return 0;  // a Query's text ends at its NUL
  const bool may_change = pgfleet::sql::MayChangeSession(sql);
  const pgfleet::sql::Classification classified = pgfleet::sql::Classify(sql);
  FUZZ_CHECK(may_change || classified.effects.empty());
  for (const auto& effect : classified.effects) {
    FUZZ_CHECK(effect.kind != pgfleet::sql::EffectKind::kSet || !effect.apply_sql.empty());
  }
  return 0;
}
