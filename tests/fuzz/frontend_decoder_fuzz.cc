// Fuzzes framing of client messages and the frontend body parsers the pooler itself runs
// (PasswordMessage, SASLInitialResponse, Query): frames are cut with PeekHeader as the relay and
// the login code cut them, checked with CheckFrontendHeader as the relay checks them, and every
// parser is run on every body. Views must stay in the input.
#include <cstdint>
#include <span>

#include "pooler/protocol/frame.h"
#include "pooler/protocol/frontend.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pgfleet::protocol;
  using pgfleet::fuzz::Within;
  if (size < 1) return 0;
  // The first byte picks the length limit: the login code's 16 KiB, or a tiny max_packet_size.
  const uint32_t max_length = (data[0] & 1) ? 16 * 1024 : 64 + data[0];
  std::span<const uint8_t> input(data + 1, size - 1);
  while (!input.empty()) {
    FrameHeader header;
    const FrameResult result = PeekHeader(input, max_length, &header);
    if (result != FrameResult::kMessage) {
      FUZZ_CHECK(result == FrameResult::kProtocolError || input.size() < kHeaderSize);
      break;
    }
    FUZZ_CHECK(header.length >= 4 && header.length <= max_length);
    (void)FrontendNeedsBody(header.type);
    // The relay's gate: whatever it lets through is a type PostgreSQL knows, within its limits.
    if (CheckFrontendHeader(header).ok()) {
      FUZZ_CHECK(header.length <= 0x3ffffffe);
      FUZZ_CHECK(header.type != 'p' && header.type != 'z');
    }
    if (input.size() < header.total_size()) break;
    std::span<const uint8_t> body = input.subspan(kHeaderSize, header.body_size());
    if (auto password = ParsePasswordMessage(body); password.ok()) {
      FUZZ_CHECK(Within(body, *password));
      FUZZ_CHECK(password->size() + 1 == body.size());
    }
    if (auto sasl = ParseSaslInitialResponse(body); sasl.ok()) {
      FUZZ_CHECK(Within(body, sasl->mechanism));
      FUZZ_CHECK(Within(body, sasl->data));
    }
    if (auto query = ParseQuery(body); query.ok()) FUZZ_CHECK(Within(body, *query));
    input = input.subspan(header.total_size());
  }
  return 0;
}
