// Fuzzes DecodeHandoff (pooler/handoff/handoff_message.h) on arbitrary bytes, as a worker receives
// them from a sibling: it must never crash or read out of bounds (ASan/UBSan), and whatever
// decodes must survive EncodeHandoff unchanged: it re-encodes to the very bytes it came from (the
// format is canonical) and those decode to an equal message.
#include <cstddef>
#include <cstdint>
#include <string>

#include "pooler/handoff/handoff_message.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using pgfleet::pool::DecodeHandoff;
  using pgfleet::pool::EncodeHandoff;
  std::string_view input = pgfleet::fuzz::AsText(data, size);
  auto decoded = DecodeHandoff(input);
  if (!decoded.ok()) {
    FUZZ_CHECK(decoded.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  std::string encoded = EncodeHandoff(*decoded);
  FUZZ_CHECK(encoded == input);
  auto again = DecodeHandoff(encoded);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(*again == *decoded);
  return 0;
}
