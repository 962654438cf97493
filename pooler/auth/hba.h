// Host-based access rules in PostgreSQL's pg_hba.conf format (auth.hba_file): which client, from
// which address, may log in to which database as which user, and with which method. Parsing and
// matching are pure; only LoadHbaFile and SystemInterfaceAddresses touch the system.
//
// Supported, as PostgreSQL reads it (doc/src/sgml/client-auth.sgml):
//   local      DATABASE USER          METHOD
//   host       DATABASE USER ADDRESS  METHOD      (also hostssl, hostnossl, hostgssenc,
//   hostnogssenc) host       DATABASE USER IP-ADDRESS IP-MASK METHOD
// DATABASE: all, sameuser, replication, names, comma lists, "quoted" names (a quoted keyword is a
// plain name). USER: all, names, comma lists, "quoted" names. ADDRESS: all, samehost, samenet, an
// IPv4 or IPv6 address with a /prefix. METHOD: trust, reject, md5, scram-sha-256, cert (hostssl
// lines), peer (local lines). `#` starts a
// comment; a line ending in `\` continues on the next.
// Not supported, and reported as an error naming the line rather than silently ignored: host
// names, @file inclusion, +group, samerole, /regex, include directives, auth options, and the
// methods password, ident, gss, sspi, pam, ldap, radius and oauth.
// Deviation: an IPv4 client seen on a dual-stack socket as ::ffff:a.b.c.d is matched as a.b.c.d,
// so IPv4 rules work whatever address family pgfleet listens on.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pgfleet::auth {

enum class HbaConnectionType { kLocal, kHost, kHostSsl, kHostNoSsl, kHostGssEnc, kHostNoGssEnc };
enum class HbaMethod { kTrust, kReject, kMd5, kScramSha256, kCert, kPeer, kPassword };

// The pg_hba.conf spelling ("scram-sha-256").
std::string_view HbaMethodName(HbaMethod method);

// An IPv4 (first 4 bytes used) or IPv6 address in network byte order.
struct IpAddress {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};
  size_t size() const { return v6 ? 16 : 4; }
  bool operator==(const IpAddress&) const = default;
};
// A numeric IPv4 or IPv6 address (no port, no brackets, no scope id); nullopt otherwise. An
// IPv4-mapped IPv6 address stays IPv6 here.
std::optional<IpAddress> ParseIpAddress(std::string_view text);

struct HbaRule {
  int line = 0;  // where the rule starts in its file
  HbaConnectionType type = HbaConnectionType::kHost;
  bool all_databases = false;
  bool same_user = false;  // "sameuser": the database named like the user
  std::vector<std::string> databases;
  bool all_users = false;
  std::vector<std::string> users;
  enum class AddressMatch { kNone, kAll, kCidr, kSameHost, kSameNet };
  AddressMatch address_match = AddressMatch::kNone;  // kNone only for `local` rules
  IpAddress address;                                 // kCidr: the network, already masked
  IpAddress mask;                                    // kCidr
  HbaMethod method = HbaMethod::kReject;
};

// One address of this host and its netmask, for samehost and samenet.
struct InterfaceAddress {
  IpAddress address;
  IpAddress netmask;
};

// What is known about a client once its startup packet is read.
struct HbaClient {
  bool local = false;  // unix socket
  bool tls = false;
  std::optional<IpAddress> address;  // TCP clients; IPv4-mapped IPv6 already folded to IPv4
  std::string_view database;
  std::string_view user;
};

// Fills `client->local` and `client->address` from an address as net::PeerAddressString writes
// it: "1.2.3.4:5432", "[::1]:5432" or "unix". False when the text is none of those.
[[nodiscard]] bool ParsePeerAddress(std::string_view peer, HbaClient* client);

class HbaRules {
 public:
  HbaRules() = default;
  explicit HbaRules(std::vector<HbaRule> rules) : rules_(std::move(rules)) {}

  // The first rule (in file order) whose connection type, database, user and address all match
  // `client`, or null when none does: like PostgreSQL, no match means the client is refused. The
  // pointer lives as long as this object.
  const HbaRule* Match(const HbaClient& client) const;

  const std::vector<HbaRule>& rules() const { return rules_; }
  // This host's addresses, for samehost/samenet (none set = those rules match nothing).
  void set_interfaces(std::vector<InterfaceAddress> interfaces) {
    interfaces_ = std::move(interfaces);
  }

 private:
  bool AddressMatches(const HbaRule& rule, const IpAddress& address) const;

  std::vector<HbaRule> rules_;
  std::vector<InterfaceAddress> interfaces_;
};

// Parses a whole file. Errors (InvalidArgument) name `source_name` and the line and say what is
// wrong; every bad line is reported, one per line of the message.
[[nodiscard]] absl::StatusOr<HbaRules> ParseHba(std::string_view text,
                                                std::string_view source_name);
// Reads `path`, parses it and attaches SystemInterfaceAddresses(); I/O errors carry errno's code.
[[nodiscard]] absl::StatusOr<HbaRules> LoadHbaFile(const std::string& path);
// Every IPv4/IPv6 address configured on this host (getifaddrs), with its netmask.
std::vector<InterfaceAddress> SystemInterfaceAddresses();

// PostgreSQL's FATAL text for a refused client: `no pg_hba.conf entry for host "1.2.3.4", user
// "u", database "d", no encryption` when `rule` is null, `pg_hba.conf rejects connection for
// ...` when it is a reject rule. `host` is the client's IP, or "[local]" for a unix socket.
std::string HbaRefusalMessage(const HbaClient& client, const HbaRule* rule);

}  // namespace pgfleet::auth
