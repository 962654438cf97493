// The random-bytes loop for the whole codec (docs/architecture.md, "Tests"): random and mutated
// valid input fed to every parser must never crash or read out of bounds (run under ASan to check
// the latter), and whatever a parser returns must point into its input.
#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "pooler/protocol/backend.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/byte_sink.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/frontend.h"
#include "pooler/protocol/negotiation.h"
#include "pooler/protocol/startup.h"

namespace pgfleet::protocol {
namespace {

constexpr int kIterations = 20000;

bool Within(std::span<const uint8_t> outer, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  if (n == 0) return true;
  return b >= outer.data() && b + n <= outer.data() + outer.size();
}
bool Within(std::span<const uint8_t> outer, std::string_view s) {
  return Within(outer, s.data(), s.size());
}
bool Within(std::span<const uint8_t> outer, std::span<const uint8_t> s) {
  return Within(outer, s.data(), s.size());
}

// Valid messages of every kind the codec knows, as seeds for mutation.
std::vector<std::string> Seeds() {
  std::vector<std::string> seeds;
  auto add = [&](auto&& build) {
    StringSink sink;
    build(sink);
    seeds.push_back(sink.bytes());
  };
  const std::array<uint8_t, 4> salt = {1, 2, 3, 4};
  const std::array<std::string_view, 2> mechs = {"SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"};
  const std::vector<std::pair<std::string_view, std::string_view>> params = {
      {"user", "u"}, {"database", "d"}, {"application_name", "fuzz"}};
  add([](ByteSink& s) { BuildAuthenticationOk(s); });
  add([&](ByteSink& s) { BuildAuthenticationMd5(s, salt); });
  add([&](ByteSink& s) { BuildAuthenticationSasl(s, mechs); });
  add([](ByteSink& s) { BuildAuthenticationSaslContinue(s, "r=a,s=b,i=1"); });
  add([](ByteSink& s) { BuildParameterStatus(s, "TimeZone", "UTC"); });
  add([&](ByteSink& s) { BuildBackendKeyData(s, 42, salt); });
  add([](ByteSink& s) { BuildReadyForQuery(s, 'T'); });
  add([](ByteSink& s) { BuildErrorResponse(s, "ERROR", "42P01", "m", "d", "h"); });
  add([](ByteSink& s) { BuildCommandComplete(s, "SELECT 1"); });
  add([&](ByteSink& s) { BuildStartupMessage(s, kProtocol30, params); });
  add([&](ByteSink& s) { BuildCancelRequest(s, 7, salt); });
  add([](ByteSink& s) { BuildPasswordMessage(s, "pw"); });
  add([](ByteSink& s) { BuildSaslInitialResponse(s, "SCRAM-SHA-256", "n,,n=,r=x"); });
  add([](ByteSink& s) { BuildQuery(s, "select 1"); });
  return seeds;
}

std::string Mutate(std::string bytes, std::mt19937& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 5) {
      case 0:  // flip a byte
        if (!bytes.empty()) bytes[rng() % bytes.size()] = static_cast<char>(rng());
        break;
      case 1:  // truncate
        if (!bytes.empty()) bytes.resize(rng() % bytes.size());
        break;
      case 2:  // append junk
        for (uint32_t n = rng() % 8; n > 0; --n) bytes.push_back(static_cast<char>(rng()));
        break;
      case 3:  // plant a NUL
        if (!bytes.empty()) bytes[rng() % bytes.size()] = '\0';
        break;
      case 4:  // drop a byte
        if (!bytes.empty()) bytes.erase(rng() % bytes.size(), 1);
        break;
    }
  }
  return bytes;
}

// Runs every parser over `input` (copied into an exactly sized heap block so that ASan sees any
// overread) and over its body after a typed header.
void FeedEverything(const std::string& bytes) {
  std::vector<uint8_t> heap(bytes.begin(), bytes.end());
  heap.shrink_to_fit();
  const std::span<const uint8_t> input(heap);

  FrameHeader header;
  if (PeekHeader(input, 1u << 20, &header) == FrameResult::kMessage) {
    ASSERT_GE(header.length, 4u);
    ASSERT_LE(header.length, 1u << 20);
  }
  uint32_t length = 0;
  if (PeekStartupLength(input, &length) == FrameResult::kMessage) {
    ASSERT_GE(length, kStartupHeaderSize);
    ASSERT_LE(length, input.size());
  }
  if (auto startup = ParseStartupPacket(input); startup.ok()) {
    if (startup->kind == StartupKind::kCancelRequest) {
      ASSERT_GE(startup->cancel_secret.size(), 4u);
      ASSERT_LE(startup->cancel_secret.size(), 256u);
    }
  }

  for (std::span<const uint8_t> body :
       {input, input.size() >= kHeaderSize ? input.subspan(kHeaderSize) : input}) {
    if (auto v = ParseAuthentication(body); v.ok()) {
      ASSERT_TRUE(Within(body, v->data));
    }
    (void)SaslOffers(body, "SCRAM-SHA-256");
    if (auto v = ParseParameterStatus(body); v.ok()) {
      ASSERT_TRUE(Within(body, v->name));
      ASSERT_TRUE(Within(body, v->value));
    }
    if (auto v = ParseBackendKeyData(body); v.ok()) {
      ASSERT_TRUE(Within(body, v->secret));
    }
    if (auto v = ParseReadyForQuery(body); v.ok()) {
      ASSERT_TRUE(*v == 'I' || *v == 'T' || *v == 'E');
    }
    if (auto v = ParseCommandComplete(body); v.ok()) {
      ASSERT_TRUE(Within(body, *v));
    }
    if (auto v = ParseErrorFields(body); v.ok()) {
      ASSERT_TRUE(Within(body, v->severity));
      ASSERT_TRUE(Within(body, v->sqlstate));
      ASSERT_TRUE(Within(body, v->message));
      ASSERT_TRUE(Within(body, v->detail));
    }
    if (auto v = ParsePasswordMessage(body); v.ok()) {
      ASSERT_TRUE(Within(body, *v));
    }
    if (auto v = ParseSaslInitialResponse(body); v.ok()) {
      ASSERT_TRUE(Within(body, v->mechanism));
      ASSERT_TRUE(Within(body, v->data));
    }
    if (auto v = ParseQuery(body); v.ok()) {
      ASSERT_TRUE(Within(body, *v));
    }
    (void)FrontendNeedsBody(body.empty() ? 0 : body[0]);
    (void)BackendNeedsBody(body.empty() ? 0 : body[0]);
  }
}

TEST(RandomBytesTest, PurelyRandomInputNeverCrashes) {
  std::mt19937 rng(0x9f1ee7);
  for (int i = 0; i < kIterations; ++i) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) {
      // Bias towards NULs and small values so that more input gets past the first checks.
      const uint32_t r = rng();
      c = static_cast<char>(r % 4 == 0 ? 0 : r >> 8);
    }
    ASSERT_NO_FATAL_FAILURE(FeedEverything(bytes)) << "iteration " << i;
  }
}

TEST(RandomBytesTest, MutatedValidPacketsNeverCrash) {
  const std::vector<std::string> seeds = Seeds();
  std::mt19937 rng(12345);
  for (int i = 0; i < kIterations; ++i) {
    std::string bytes = seeds[rng() % seeds.size()];
    if (rng() % 8 != 0) bytes = Mutate(std::move(bytes), rng);
    ASSERT_NO_FATAL_FAILURE(FeedEverything(bytes)) << "iteration " << i;
  }
}

TEST(RandomBytesTest, EveryPrefixOfEverySeedIsSafe) {
  // Partial input: each valid packet cut at every length.
  for (const std::string& seed : Seeds()) {
    for (size_t n = 0; n <= seed.size(); ++n) {
      ASSERT_NO_FATAL_FAILURE(FeedEverything(seed.substr(0, n))) << n;
    }
  }
}

}  // namespace
}  // namespace pgfleet::protocol
