// Fuzzes the two auth files pgfleet reads: the userlist (auth.file, PgBouncer's format) and the
// pg_hba.conf rules (auth.hba_file), and matching clients against parsed rules. The first byte
// picks the parser. Userlist errors must never quote a line, because lines hold passwords.
#include <cstdint>
#include <string>
#include <string_view>

#include "pooler/auth/hba.h"
#include "pooler/auth/userlist.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pgfleet::auth;
  if (size < 1) return 0;
  const std::string_view text = pgfleet::fuzz::AsText(data + 1, size - 1);
  if ((data[0] & 1) == 0) {
    auto users = ParseUserlist(text, "fuzz");
    if (!users.ok()) {
      // "fuzz:<line>: <reason>" with a fixed reason: bounded whatever the line held.
      FUZZ_CHECK(users.status().message().size() < 128);
    } else {
      for (const auto& [user, secret] : *users) FUZZ_CHECK(!user.empty());
    }
    return 0;
  }
  auto rules = ParseHba(text, "fuzz");
  if (!rules.ok()) return 0;
  rules->set_interfaces({{*ParseIpAddress("10.0.0.5"), *ParseIpAddress("255.255.0.0")},
                         {*ParseIpAddress("fd00::5"), *ParseIpAddress("ffff:ffff::")}});
  // Clients named after what the rules mention, from a few addresses, local and TCP.
  static const char* const kPeers[] = {"unix",    "127.0.0.1:1",         "10.0.3.4:2",
                                       "[::1]:3", "[::ffff:10.0.0.5]:4", "[fd00::9]:5"};
  for (const HbaRule& rule : rules->rules()) {
    FUZZ_CHECK(rule.line >= 1);
    const std::string_view user = rule.users.empty() ? "u" : std::string_view(rule.users[0]);
    const std::string_view db = rule.databases.empty() ? user : std::string_view(rule.databases[0]);
    for (const char* peer : kPeers) {
      HbaClient client;
      FUZZ_CHECK(ParsePeerAddress(peer, &client));
      client.database = db;
      client.user = user;
      for (bool tls : {false, true}) {
        client.tls = tls;
        const HbaRule* match = rules->Match(client);
        FUZZ_CHECK(match == nullptr || (match >= rules->rules().data() &&
                                        match < rules->rules().data() + rules->rules().size()));
        (void)HbaRefusalMessage(client, match);
      }
    }
  }
  HbaClient odd;
  (void)ParsePeerAddress(text.substr(0, 64), &odd);
  return 0;
}
