// Typed peering and controller options.
#include "peering/fleet_options.h"

#include <cstdlib>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pooler/base/strings.h"

namespace pgfleet::peering {
namespace {

class Reader {
 public:
  Reader(const std::map<std::string, std::string>& values, std::string section,
         std::vector<std::string>& errors)
      : values_(values), section_(std::move(section)), errors_(errors) {}

  void String(const std::string& key, std::string& out) {
    if (const std::string* v = Take(key)) out = *v;
  }
  void Duration(const std::string& key, absl::Duration& out) {
    const std::string* v = Take(key);
    if (v == nullptr) return;
    auto parsed = config::ParseDuration(*v);
    if (!parsed.ok()) {
      Error(key, base::Sv(parsed.status().message()));
    } else {
      out = *parsed;
    }
  }
  void Int(const std::string& key, int& out) {
    const std::string* v = Take(key);
    if (v != nullptr && !absl::SimpleAtoi(*v, &out)) {
      Error(key, absl::StrCat("expected an integer, got \"", *v, "\""));
    }
  }
  void Bool(const std::string& key, bool& out) {
    const std::string* v = Take(key);
    if (v == nullptr) return;
    if (*v == "true" || *v == "yes" || *v == "on" || *v == "1") {
      out = true;
    } else if (*v == "false" || *v == "no" || *v == "off" || *v == "0") {
      out = false;
    } else {
      Error(key, absl::StrCat("expected true or false, got \"", *v, "\""));
    }
  }
  // "key.0", "key.1", ... (a YAML list), or one scalar "key".
  void List(const std::string& key, std::vector<std::string>& out) {
    if (const std::string* v = Take(key)) {
      if (!v->empty()) out.push_back(*v);
    }
    for (int i = 0;; ++i) {
      const std::string* v = Take(absl::StrCat(key, ".", i));
      if (v == nullptr) break;
      out.push_back(*v);
    }
  }
  void HostPort(const std::string& key, const std::string& value) {
    if (value.empty()) return;
    const size_t colon = value.rfind(':');
    int port = -1;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(value.substr(colon + 1), &port) || port < 0 || port > 65535) {
      Error(key, absl::StrCat("expected host:port, got \"", value, "\""));
    }
  }
  void Error(const std::string& key, std::string_view message) {
    errors_.push_back(base::StrCat(section_, ".", key, ": ", message));
  }
  std::vector<std::string> Unused() const {
    std::vector<std::string> out;
    for (const auto& [key, value] : values_) {
      if (!used_.contains(key)) out.push_back(absl::StrCat(section_, ".", key));
    }
    return out;
  }

 private:
  const std::string* Take(const std::string& key) {
    auto it = values_.find(key);
    if (it == values_.end()) return nullptr;
    used_.insert(key);
    return &it->second;
  }

  const std::map<std::string, std::string>& values_;
  std::string section_;
  std::vector<std::string>& errors_;
  std::set<std::string> used_;
};

}  // namespace

absl::StatusOr<FleetOptions> ParseFleetOptions(const config::Config& config) {
  FleetOptions out;
  std::vector<std::string> errors;
  {
    PeeringOptions& p = out.peering;
    Reader r(config.peering, "peering", errors);
    r.String("runtime_dir", p.runtime_dir);
    r.String("listen", p.listen);
    r.HostPort("listen", p.listen);
    r.String("advertise_address", p.advertise_address);
    r.HostPort("advertise_address", p.advertise_address);
    r.String("advertise_address_env", p.advertise_address_env);
    r.String("token_file", p.token_file);
    r.String("tls.cert_file", p.tls.cert_file);
    r.String("tls.key_file", p.tls.key_file);
    r.String("tls.ca_file", p.tls.ca_file);
    r.String("tls.server_name", p.tls.server_name);
    r.List("static_peers", p.static_peers);
    for (size_t i = 0; i < p.static_peers.size(); ++i) {
      r.HostPort(absl::StrCat("static_peers.", i), p.static_peers[i]);
    }
    r.String("discovery_dns", p.discovery_dns);
    r.Duration("discovery_interval", p.discovery_interval);
    r.Bool("forward_cancels", p.forward_cancels);
    if (p.tls.enabled() && (p.tls.key_file.empty() || p.tls.ca_file.empty())) {
      r.Error("tls", "cert_file needs key_file and ca_file (peers verify each other)");
    }
    if (!p.tls.enabled() && (!p.tls.key_file.empty() || !p.tls.ca_file.empty())) {
      r.Error("tls", "key_file and ca_file need cert_file");
    }
    if (!p.listen.empty() && p.token_file.empty() && !p.tls.enabled()) {
      r.Error("listen",
              "needs peering.token_file or peering.tls: an unauthenticated peering port would let "
              "anyone who reaches it cancel queries");
    }
    if (!p.discovery_dns.empty() && p.listen.empty()) {
      r.Error("discovery_dns", "needs peering.listen (its port is the peers' port)");
    }
    for (auto& key : r.Unused()) out.warnings.push_back(key + ": unknown key, ignored");
  }
  {
    ControllerOptions& c = out.controller;
    Reader r(config.controller, "controller", errors);
    r.String("address", c.address);
    r.HostPort("address", c.address);
    r.String("listen", c.listen);
    r.HostPort("listen", c.listen);
    r.Duration("lease_timeout", c.lease_timeout);
    r.Duration("renew_interval", c.renew_interval);
    r.Duration("forget_after", c.forget_after);
    r.Duration("register_timeout", c.register_timeout);
    r.Int("min_share", c.min_share);
    if (c.renew_interval <= absl::ZeroDuration()) r.Error("renew_interval", "must be positive");
    if (c.lease_timeout < 3 * c.renew_interval) {
      r.Error("lease_timeout", "must be at least 3 x controller.renew_interval");
    }
    if (c.forget_after < 2 * c.lease_timeout) {
      r.Error("forget_after", "must be at least 2 x controller.lease_timeout");
    }
    if (c.min_share < 0) r.Error("min_share", "must not be negative");
    for (auto& key : r.Unused()) errors.push_back(key + ": unknown key");
  }
  if (!errors.empty()) {
    for (auto& e : errors) e = absl::StrCat(config.source_path, ": ", e);
    return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  }
  return out;
}

std::string ResolveAdvertiseAddress(const PeeringOptions& options) {
  if (!options.advertise_address.empty()) return options.advertise_address;
  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos) return "";
  const std::string port = options.listen.substr(colon + 1);
  if (!options.advertise_address_env.empty()) {
    const char* host = std::getenv(options.advertise_address_env.c_str());
    if (host != nullptr && *host != '\0') {
      const bool v6 = std::string_view(host).find(':') != std::string_view::npos;
      return v6 ? absl::StrCat("[", host, "]:", port) : absl::StrCat(host, ":", port);
    }
  }
  const std::string host = options.listen.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "*") return "";
  return options.listen;
}

}  // namespace pgfleet::peering
