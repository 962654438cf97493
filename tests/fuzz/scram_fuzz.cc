// Fuzzes both sides of the SCRAM-SHA-256 exchange against a fixed secret ("pencil"): the server
// side (pgfleet verifying a client) and the client side (pgfleet logging in to a server), plus
// ParseScramSecret. The first byte picks the side; the messages are separated by NUL bytes. No
// input may crash, and none may authenticate without the password.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pooler/auth/scram.h"
#include "pooler/auth/scram_primitives.h"
#include "pooler/base/random.h"
#include "tests/fuzz/fuzz_check.h"

namespace pgfleet::auth {
namespace {

// Deterministic randomness, so a crash replays and nonces are the same in every run.
class CountingRandom final : public base::RandomSource {
 public:
  void Fill(std::span<uint8_t> out) override {
    for (uint8_t& b : out) b = static_cast<uint8_t>(next_++ * 131 + 7);
  }

 private:
  uint32_t next_ = 0;
};

const ScramSecret& Secret() {
  static const ScramSecret secret = [] {
    const uint8_t salt[] = {'f', 'u', 'z', 'z', 's', 'a', 'l', 't'};
    return MakeScramSecret("pencil", salt, 4096);
  }();
  return secret;
}

std::vector<std::string_view> SplitNul(std::string_view text) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t end = text.find('\0');
    parts.push_back(text.substr(0, end));
    if (end == std::string_view::npos) return parts;
    text.remove_prefix(end + 1);
  }
}

// The i= count in a server-first message when it is small enough for PBKDF2 in a fuzz loop.
bool SmallIterations(std::string_view server_first) {
  const size_t at = server_first.find(",i=");
  if (at == std::string_view::npos) return false;
  std::string_view digits = server_first.substr(at + 3);
  return digits.size() >= 1 && digits.size() <= 4;
}

}  // namespace
}  // namespace pgfleet::auth

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pgfleet::auth;
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 3;
  const std::string_view rest = pgfleet::fuzz::AsText(data + 1, size - 1);
  const std::vector<std::string_view> parts = SplitNul(rest);
  CountingRandom random;
  if (mode == 0) {
    ScramServerExchange server(Secret(), random);
    auto server_first = server.HandleClientFirst(parts[0]);
    if (!server_first.ok() || parts.size() < 2) return 0;
    auto server_final = server.HandleClientFinal(parts[1]);
    // Forging a proof for "pencil" by mutation would be a break of HMAC-SHA-256.
    FUZZ_CHECK(!server_final.ok());
    FUZZ_CHECK(!server.HandleClientFirst(parts[0]).ok());  // the exchange is over
  } else if (mode == 1) {
    // With the ClientKey recovered from a client: no PBKDF2, so any i= is cheap.
    static const ScramKey client_key = internal::ClientKeyFromSalted(
        internal::SaltedPassword("pencil", Secret().salt, Secret().iterations));
    const bool password = parts.size() > 2 && SmallIterations(parts[0]);
    ScramClientExchange client =
        password ? ScramClientExchange::WithPassword("pencil", random)
                 : ScramClientExchange::WithClientKey(client_key, Secret(), random);
    (void)client.ClientFirst();
    auto client_final = client.HandleServerFirst(parts[0]);
    if (!client_final.ok()) {
      FUZZ_CHECK(!client.VerifyServerFinal(parts.size() > 1 ? parts[1] : "").ok());
      return 0;
    }
    if (parts.size() > 1) {
      // Passing needs the server key, which only someone holding the secret has.
      FUZZ_CHECK(!client.VerifyServerFinal(parts[1]).ok());
    }
  } else {
    auto secret = ParseScramSecret(rest);
    if (secret.ok()) {
      FUZZ_CHECK(secret->iterations > 0 && !secret->salt.empty());
      auto again = ParseScramSecret(FormatScramSecret(*secret));
      FUZZ_CHECK(
          again.ok() && again->salt == secret->salt && again->stored_key == secret->stored_key &&
          again->server_key == secret->server_key && again->iterations == secret->iterations);
    }
  }
  return 0;
}
