// Fuzzes the YAML config loader (LoadConfigText): yaml-cpp's exceptions must all stop in
// yaml_loader.cc, and a config that loads must pass ValidateConfig and survive the per-worker
// budget split and the lookups a worker makes.
#include <algorithm>
#include <cstdint>
#include <string>

#include "pooler/config/config.h"
#include "pooler/config/worker_share.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pgfleet::config;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = LoadConfigText(text, "/fuzz/pgfleet.yaml");
  if (!config.ok()) {
    FUZZ_CHECK(!config.status().message().empty());
    return 0;
  }
  FUZZ_CHECK(ValidateConfig(*config).ok());
  // A worker's reported share of each database's budget adds up to the budget.
  for (const auto& [name, db] : config->databases) {
    int sum = 0;
    for (int index = 0; index < 3; ++index)
      sum += std::max(0, StrictShare(db.max_db_connections, index, 3));
    FUZZ_CHECK(db.max_db_connections <= 0 || sum == db.max_db_connections);
  }
  for (const auto& [name, db] : config->databases) {
    auto found = config->FindDatabase(name);
    FUZZ_CHECK(found.has_value());
    (void)config->EffectivePoolMode(*found, "fuzz");
    (void)config->EffectivePoolSize(*found);
    (void)config->EffectiveMinPoolSize(*found);
    (void)config->EffectiveReservePoolSize(*found);
  }
  (void)config->FindDatabase("no-such-database");
  (void)config->EffectiveMaxUserConnections("fuzz");
  return 0;
}
