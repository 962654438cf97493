// Peering and controller options, from the typed config sections.
#include "peering/fleet_options.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "pooler/base/status_macros.h"

namespace pgfleet::peering {

absl::StatusOr<FleetOptions> ParseFleetOptions(const config::Config& config) {
  RETURN_IF_ERROR(config::ValidateFleetSections(config));
  FleetOptions out;
  out.peering = config.peering;
  out.controller = config.controller;
  out.warnings = config.warnings;
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
