// Protocol version negotiation with clients, as PostgreSQL 18 does it (docs/architecture.md,
// "The wire codec"): pgfleet speaks 3.0 and 3.2 (3.1 was never used: PostgreSQL skips it because
// old PgBouncers mishandled it, and treats a request for it like 3.0 with NegotiateProtocolVersion
// never sent). A request for a newer 3.x minor gets the newest pgfleet speaks; every `_pq_.`
// option is listed as unrecognised (pgfleet knows none). Pure: the client connection sends what
// this decides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pgfleet::protocol {

inline constexpr uint32_t kProtocol32 = (3u << 16) | 2;  // PostgreSQL 18
inline constexpr uint32_t kProtocolLatest = kProtocol32;

inline constexpr uint32_t ProtocolMajor(uint32_t version) { return version >> 16; }
inline constexpr uint32_t ProtocolMinor(uint32_t version) { return version & 0xffff; }

struct ProtocolAnswer {
  uint32_t version = 0;  // spoken from here on
  // Send NegotiateProtocolVersion(version, unrecognized) before anything else.
  bool negotiate = false;
  std::vector<std::string> unrecognized;  // the `_pq_.` options, in the client's order
};

// `requested` is a 3.x version (ParseStartupPacket refuses other majors).
ProtocolAnswer NegotiateProtocol(uint32_t requested,
                                 const std::vector<std::pair<std::string, std::string>>& params);

// The BackendKeyData secret length pgfleet mints for a client speaking `version`: 4 bytes up to
// 3.1, 32 from 3.2 on (as PostgreSQL 18).
size_t CancelSecretSizeFor(uint32_t version);

}  // namespace pgfleet::protocol
