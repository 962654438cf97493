// pg_hba.conf parser and matcher; see hba.h for the supported subset.
#include "pooler/auth/hba.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "pooler/base/strings.h"

namespace pgfleet::auth {
namespace {

using base::IsBlank;

// One comma-separated element of a field; `quoted` when any part of it was in double quotes,
// which makes a keyword ("all") a plain name.
struct Item {
  std::string text;
  bool quoted = false;
};
using Field = std::vector<Item>;

// Splits one logical line into fields the way PostgreSQL's next_field_expand() does: blanks
// separate fields, a comma continues the field with another item (blanks after it allowed),
// double quotes protect blanks, commas and '#', and an unquoted '#' starts a comment. On error
// returns false with `error` set.
bool Tokenize(std::string_view line, std::vector<Field>* fields, std::string* error) {
  size_t i = 0;
  const size_t n = line.size();
  while (true) {
    while (i < n && IsBlank(line[i])) ++i;
    if (i == n || line[i] == '#') return true;
    Field field;
    while (true) {
      Item item;
      bool in_quote = false;
      while (i < n) {
        const char c = line[i];
        if (c == '"') {
          in_quote = !in_quote;
          item.quoted = true;
          ++i;
          continue;
        }
        if (!in_quote && (IsBlank(c) || c == ',' || c == '#')) break;
        item.text.push_back(c);
        ++i;
      }
      if (in_quote) {
        *error = "unterminated quoted string";
        return false;
      }
      if (item.text.empty() && !item.quoted) {
        *error = "empty element in a comma-separated list";
        return false;
      }
      field.push_back(std::move(item));
      if (i < n && line[i] == ',') {
        ++i;
        while (i < n && IsBlank(line[i])) ++i;
        if (i == n || line[i] == '#') {
          *error = "list ends with a comma";
          return false;
        }
        continue;
      }
      break;
    }
    fields->push_back(std::move(field));
  }
}

bool IsKeyword(const Item& item, std::string_view keyword) {
  return !item.quoted && item.text == keyword;
}

// The single unquoted word of `field`, or nullopt when it is a list or quoted.
std::optional<std::string_view> SingleWord(const Field& field) {
  if (field.size() != 1 || field[0].quoted) return std::nullopt;
  return std::string_view(field[0].text);
}

std::optional<HbaConnectionType> ParseConnectionType(std::string_view word) {
  if (word == "local") return HbaConnectionType::kLocal;
  if (word == "host") return HbaConnectionType::kHost;
  if (word == "hostssl") return HbaConnectionType::kHostSsl;
  if (word == "hostnossl") return HbaConnectionType::kHostNoSsl;
  if (word == "hostgssenc") return HbaConnectionType::kHostGssEnc;
  if (word == "hostnogssenc") return HbaConnectionType::kHostNoGssEnc;
  return std::nullopt;
}

// A contiguous netmask of `bits` for the family of `v6`.
IpAddress PrefixMask(bool v6, int bits) {
  IpAddress mask;
  mask.v6 = v6;
  for (size_t i = 0; i < mask.size(); ++i) {
    const int take = std::min(8, std::max(0, bits - static_cast<int>(i) * 8));
    mask.bytes[i] = static_cast<uint8_t>(take == 0 ? 0 : (0xff << (8 - take)) & 0xff);
  }
  return mask;
}

IpAddress Masked(const IpAddress& address, const IpAddress& mask) {
  IpAddress out = address;
  for (size_t i = 0; i < out.size(); ++i) out.bytes[i] &= mask.bytes[i];
  return out;
}

bool SameNetwork(const IpAddress& a, const IpAddress& b, const IpAddress& mask) {
  if (a.v6 != b.v6 || a.v6 != mask.v6) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if ((a.bytes[i] & mask.bytes[i]) != (b.bytes[i] & mask.bytes[i])) return false;
  }
  return true;
}

// ::ffff:a.b.c.d -> a.b.c.d; anything else unchanged.
IpAddress FoldV4Mapped(const IpAddress& address) {
  if (!address.v6) return address;
  for (int i = 0; i < 10; ++i) {
    if (address.bytes[i] != 0) return address;
  }
  if (address.bytes[10] != 0xff || address.bytes[11] != 0xff) return address;
  IpAddress v4;
  std::memcpy(v4.bytes.data(), address.bytes.data() + 12, 4);
  return v4;
}

std::string FormatIpAddress(const IpAddress& address) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(address.v6 ? AF_INET6 : AF_INET, address.bytes.data(), text, sizeof(text));
  return text;
}

// Fills the address columns of `rule` from fields[*next]; advances *next past them.
std::optional<std::string> ParseAddress(const std::vector<Field>& fields, size_t* next,
                                        HbaRule* rule) {
  const Field& field = fields[*next];
  ++*next;
  if (field.size() != 1) return "the address field must be a single address";
  const Item& item = field[0];
  if (IsKeyword(item, "all")) {
    rule->address_match = HbaRule::AddressMatch::kAll;
    return std::nullopt;
  }
  if (IsKeyword(item, "samehost")) {
    rule->address_match = HbaRule::AddressMatch::kSameHost;
    return std::nullopt;
  }
  if (IsKeyword(item, "samenet")) {
    rule->address_match = HbaRule::AddressMatch::kSameNet;
    return std::nullopt;
  }
  std::string_view text = item.text;
  const size_t slash = text.find('/');
  std::optional<IpAddress> address = ParseIpAddress(text.substr(0, slash));
  if (!address.has_value()) {
    return base::StrCat("invalid IP address \"", text.substr(0, slash),
                        "\" (host names are not supported; use an address with a /prefix)");
  }
  IpAddress mask;
  if (slash != std::string_view::npos) {
    std::string_view bits_text = text.substr(slash + 1);
    const int max_bits = address->v6 ? 128 : 32;
    int bits = 0;
    if (bits_text.empty() || bits_text.size() > 3) return "invalid CIDR mask in address";
    for (char c : bits_text) {
      if (c < '0' || c > '9') return "invalid CIDR mask in address";
      bits = bits * 10 + (c - '0');
    }
    if (bits > max_bits) return "invalid CIDR mask in address";
    mask = PrefixMask(address->v6, bits);
  } else {
    // IP-address IP-mask in two columns.
    if (*next >= fields.size()) return "missing IP mask after the address (or use a /prefix)";
    const Field& mask_field = fields[*next];
    ++*next;
    std::optional<std::string_view> mask_text = SingleWord(mask_field);
    std::optional<IpAddress> parsed = mask_text ? ParseIpAddress(*mask_text) : std::nullopt;
    if (!parsed.has_value()) return "invalid IP mask";
    if (parsed->v6 != address->v6) return "IP address and mask do not match in family";
    mask = *parsed;
  }
  rule->address_match = HbaRule::AddressMatch::kCidr;
  rule->mask = mask;
  rule->address = Masked(*address, mask);
  return std::nullopt;
}

std::optional<std::string> ParseDatabases(const Field& field, HbaRule* rule) {
  for (const Item& item : field) {
    if (IsKeyword(item, "all")) {
      rule->all_databases = true;
    } else if (IsKeyword(item, "sameuser")) {
      rule->same_user = true;
    } else if (IsKeyword(item, "replication")) {
      // Replication connections are not pooled; the keyword matches none of ours.
    } else if (IsKeyword(item, "samerole") || IsKeyword(item, "samegroup")) {
      return base::StrCat("\"", item.text, "\" is not supported (pgfleet does not know roles)");
    } else if (!item.quoted && !item.text.empty() && item.text[0] == '@') {
      return "@file inclusion is not supported";
    } else if (!item.quoted && !item.text.empty() && item.text[0] == '/') {
      return "regular expressions are not supported";
    } else if (item.text.empty()) {
      return "empty database name";
    } else {
      rule->databases.push_back(item.text);
    }
  }
  return std::nullopt;
}

std::optional<std::string> ParseUsers(const Field& field, HbaRule* rule) {
  for (const Item& item : field) {
    if (IsKeyword(item, "all")) {
      rule->all_users = true;
    } else if (!item.quoted && !item.text.empty() && item.text[0] == '+') {
      return "+group membership is not supported";
    } else if (!item.quoted && !item.text.empty() && item.text[0] == '@') {
      return "@file inclusion is not supported";
    } else if (!item.quoted && !item.text.empty() && item.text[0] == '/') {
      return "regular expressions are not supported";
    } else if (item.text.empty()) {
      return "empty user name";
    } else {
      rule->users.push_back(item.text);
    }
  }
  return std::nullopt;
}

std::optional<std::string> ParseMethod(const Field& field, HbaRule* rule) {
  std::optional<std::string_view> word = SingleWord(field);
  if (!word.has_value()) return "the method field must be a single unquoted word";
  if (*word == "trust") {
    rule->method = HbaMethod::kTrust;
  } else if (*word == "reject") {
    rule->method = HbaMethod::kReject;
  } else if (*word == "md5") {
    rule->method = HbaMethod::kMd5;
  } else if (*word == "scram-sha-256") {
    rule->method = HbaMethod::kScramSha256;
  } else if (*word == "cert") {
    // As PostgreSQL checks it when it loads the file.
    if (rule->type != HbaConnectionType::kHostSsl) {
      return "cert authentication is only supported on hostssl connections";
    }
    rule->method = HbaMethod::kCert;
  } else if (*word == "peer") {
    if (rule->type != HbaConnectionType::kLocal) {
      return "peer authentication is only supported on local sockets";
    }
    rule->method = HbaMethod::kPeer;
  } else if (*word == "password") {
    rule->method = HbaMethod::kPassword;  // cleartext, as PostgreSQL's (PgBouncer's plain)
  } else if (*word == "ident" || *word == "gss" || *word == "sspi" || *word == "pam" ||
             *word == "ldap" || *word == "radius" || *word == "bsd" || *word == "oauth") {
    return base::StrCat("method \"", *word, "\" is not supported by pgfleet");
  } else {
    return base::StrCat("invalid authentication method \"", *word, "\"");
  }
  return std::nullopt;
}

// One rule from the fields of one logical line; a message on error.
std::optional<std::string> ParseRule(const std::vector<Field>& fields, HbaRule* rule) {
  std::optional<std::string_view> type_word = SingleWord(fields[0]);
  if (type_word.has_value() && type_word->starts_with("include")) {
    return "include directives are not supported";
  }
  std::optional<HbaConnectionType> type =
      type_word.has_value() ? ParseConnectionType(*type_word) : std::nullopt;
  if (!type.has_value()) {
    return "invalid connection type (expected local, host, hostssl, hostnossl, hostgssenc or "
           "hostnogssenc)";
  }
  rule->type = *type;
  const bool local = *type == HbaConnectionType::kLocal;
  const size_t minimum = local ? 4 : 5;
  if (fields.size() < minimum) {
    return local ? "expected: local DATABASE USER METHOD"
                 : "expected: host DATABASE USER ADDRESS METHOD";
  }
  if (auto error = ParseDatabases(fields[1], rule)) return error;
  if (auto error = ParseUsers(fields[2], rule)) return error;
  size_t next = 3;
  if (!local) {
    if (auto error = ParseAddress(fields, &next, rule)) return error;
  }
  if (next >= fields.size()) return "missing authentication method";
  if (auto error = ParseMethod(fields[next], rule)) return error;
  if (next + 1 < fields.size()) return "authentication options are not supported";
  return std::nullopt;
}

bool ListHas(const std::vector<std::string>& list, std::string_view name) {
  for (const std::string& entry : list) {
    if (entry == name) return true;
  }
  return false;
}

bool TypeMatches(HbaConnectionType type, const HbaClient& client) {
  switch (type) {
    case HbaConnectionType::kLocal:
      return client.local;
    case HbaConnectionType::kHost:
    case HbaConnectionType::kHostNoGssEnc:
      return !client.local;
    case HbaConnectionType::kHostSsl:
      return !client.local && client.tls;
    case HbaConnectionType::kHostNoSsl:
      return !client.local && !client.tls;
    case HbaConnectionType::kHostGssEnc:
      return false;  // pgfleet answers 'N' to GSSENCRequest
  }
  return false;
}

}  // namespace

std::string_view HbaMethodName(HbaMethod method) {
  switch (method) {
    case HbaMethod::kTrust:
      return "trust";
    case HbaMethod::kReject:
      return "reject";
    case HbaMethod::kMd5:
      return "md5";
    case HbaMethod::kScramSha256:
      return "scram-sha-256";
    case HbaMethod::kCert:
      return "cert";
    case HbaMethod::kPeer:
      return "peer";
    case HbaMethod::kPassword:
      return "password";
  }
  return "unknown";
}

std::optional<IpAddress> ParseIpAddress(std::string_view text) {
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  char buffer[INET6_ADDRSTRLEN] = {};
  std::memcpy(buffer, text.data(), text.size());
  if (std::memchr(buffer, '\0', text.size()) != nullptr) return std::nullopt;
  IpAddress address;
  if (inet_pton(AF_INET, buffer, address.bytes.data()) == 1) return address;
  if (inet_pton(AF_INET6, buffer, address.bytes.data()) == 1) {
    address.v6 = true;
    return address;
  }
  return std::nullopt;
}

bool ParsePeerAddress(std::string_view peer, HbaClient* client) {
  if (peer == "unix") {
    client->local = true;
    client->address.reset();
    return true;
  }
  std::string_view host;
  if (!peer.empty() && peer.front() == '[') {
    const size_t close = peer.find(']');
    if (close == std::string_view::npos) return false;
    host = peer.substr(1, close - 1);
  } else {
    host = peer.substr(0, peer.rfind(':'));
  }
  std::optional<IpAddress> address = ParseIpAddress(host);
  if (!address.has_value()) return false;
  client->local = false;
  client->address = FoldV4Mapped(*address);
  return true;
}

bool HbaRules::AddressMatches(const HbaRule& rule, const IpAddress& address) const {
  switch (rule.address_match) {
    case HbaRule::AddressMatch::kNone:
      return false;
    case HbaRule::AddressMatch::kAll:
      return true;
    case HbaRule::AddressMatch::kCidr:
      return SameNetwork(address, rule.address, rule.mask);
    case HbaRule::AddressMatch::kSameHost:
      for (const InterfaceAddress& iface : interfaces_) {
        if (FoldV4Mapped(iface.address) == address) return true;
      }
      return false;
    case HbaRule::AddressMatch::kSameNet:
      for (const InterfaceAddress& iface : interfaces_) {
        if (SameNetwork(address, iface.address, iface.netmask)) return true;
      }
      return false;
  }
  return false;
}

const HbaRule* HbaRules::Match(const HbaClient& client) const {
  for (const HbaRule& rule : rules_) {
    if (!TypeMatches(rule.type, client)) continue;
    if (!rule.all_databases && !(rule.same_user && client.database == client.user) &&
        !ListHas(rule.databases, client.database)) {
      continue;
    }
    if (!rule.all_users && !ListHas(rule.users, client.user)) continue;
    if (rule.type != HbaConnectionType::kLocal &&
        (!client.address.has_value() || !AddressMatches(rule, *client.address))) {
      continue;
    }
    return &rule;
  }
  return nullptr;
}

absl::StatusOr<HbaRules> ParseHba(std::string_view text, std::string_view source_name) {
  std::vector<HbaRule> rules;
  std::string errors;
  std::string logical;  // a line with its `\` continuations joined
  bool continuing = false;
  int line_number = 0;
  int logical_start = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!continuing) logical_start = line_number;
    continuing = !line.empty() && line.back() == '\\';
    if (continuing) line.remove_suffix(1);
    base::StrAppend(&logical, line);
    // The last line of the file has nothing to continue with.
    if (continuing && !text.empty()) continue;
    continuing = false;

    std::vector<Field> fields;
    std::string error;
    HbaRule rule;
    rule.line = logical_start;
    if (Tokenize(logical, &fields, &error) && !fields.empty()) {
      if (std::optional<std::string> rule_error = ParseRule(fields, &rule)) {
        error = std::move(*rule_error);
      } else {
        rules.push_back(std::move(rule));
      }
    }
    if (!error.empty()) {
      if (!errors.empty()) errors.push_back('\n');
      base::StrAppend(&errors, source_name, ":", logical_start, ": ", error);
    }
    logical.clear();
  }
  if (!errors.empty()) return absl::InvalidArgumentError(errors);
  return HbaRules(std::move(rules));
}

absl::StatusOr<HbaRules> LoadHbaFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, base::StrCat("cannot open hba file ", path));
  std::string contents;
  char buffer[8192];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return absl::ErrnoToStatus(err, base::StrCat("cannot read hba file ", path));
    }
    contents.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  absl::StatusOr<HbaRules> rules = ParseHba(contents, path);
  if (rules.ok()) rules->set_interfaces(SystemInterfaceAddresses());
  return rules;
}

std::vector<InterfaceAddress> SystemInterfaceAddresses() {
  std::vector<InterfaceAddress> out;
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (struct ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || ifa->ifa_netmask == nullptr) continue;
    InterfaceAddress entry;
    if (ifa->ifa_addr->sa_family == AF_INET) {
      std::memcpy(entry.address.bytes.data(),
                  &reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr)->sin_addr, 4);
      std::memcpy(entry.netmask.bytes.data(),
                  &reinterpret_cast<const sockaddr_in*>(ifa->ifa_netmask)->sin_addr, 4);
    } else if (ifa->ifa_addr->sa_family == AF_INET6) {
      entry.address.v6 = entry.netmask.v6 = true;
      std::memcpy(entry.address.bytes.data(),
                  &reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr)->sin6_addr, 16);
      std::memcpy(entry.netmask.bytes.data(),
                  &reinterpret_cast<const sockaddr_in6*>(ifa->ifa_netmask)->sin6_addr, 16);
    } else {
      continue;
    }
    out.push_back(entry);
  }
  freeifaddrs(list);
  return out;
}

std::string HbaRefusalMessage(const HbaClient& client, const HbaRule* rule) {
  const std::string host =
      client.local || !client.address.has_value() ? "[local]" : FormatIpAddress(*client.address);
  return base::StrCat(rule != nullptr ? "pg_hba.conf rejects connection" : "no pg_hba.conf entry",
                      " for host \"", host, "\", user \"", client.user, "\", database \"",
                      client.database, "\", ", client.tls ? "SSL encryption" : "no encryption");
}

}  // namespace pgfleet::auth
