// Fuzzes framing of server messages and every backend body parser (Authentication*,
// ParameterStatus, BackendKeyData, ReadyForQuery, CommandComplete, ErrorResponse): a hostile or
// broken server must not be able to make a worker read out of bounds.
#include <cstdint>
#include <span>

#include "pooler/protocol/backend.h"
#include "pooler/protocol/frame.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pgfleet::protocol;
  using pgfleet::fuzz::Within;
  std::span<const uint8_t> input(data, size);
  while (!input.empty()) {
    FrameHeader header;
    if (PeekHeader(input, 1u << 30, &header) != FrameResult::kMessage) break;
    (void)BackendNeedsBody(header.type);
    if (input.size() < header.total_size()) break;
    std::span<const uint8_t> body = input.subspan(kHeaderSize, header.body_size());
    if (auto auth = ParseAuthentication(body); auth.ok()) {
      FUZZ_CHECK(Within(body, auth->data));
      (void)SaslOffers(auth->data, "SCRAM-SHA-256");
      (void)SaslOffers(auth->data, "");
    }
    if (auto status = ParseParameterStatus(body); status.ok()) {
      FUZZ_CHECK(Within(body, status->name) && Within(body, status->value));
    }
    if (auto key = ParseBackendKeyData(body); key.ok()) {
      FUZZ_CHECK(Within(body, key->secret));
      FUZZ_CHECK(key->secret.size() >= 4 && key->secret.size() <= 256);
    }
    if (auto rfq = ParseReadyForQuery(body); rfq.ok()) {
      FUZZ_CHECK(*rfq == 'I' || *rfq == 'T' || *rfq == 'E');
    }
    if (auto tag = ParseCommandComplete(body); tag.ok()) FUZZ_CHECK(Within(body, *tag));
    if (auto fields = ParseErrorFields(body); fields.ok()) {
      FUZZ_CHECK(Within(body, fields->severity) && Within(body, fields->sqlstate) &&
                 Within(body, fields->message) && Within(body, fields->detail));
    }
    input = input.subspan(header.total_size());
  }
  return 0;
}
