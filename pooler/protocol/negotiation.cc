// Protocol version negotiation.
#include "pooler/protocol/negotiation.h"

#include <algorithm>

#include "pooler/protocol/cancel_key.h"

namespace pgfleet::protocol {

ProtocolAnswer NegotiateProtocol(uint32_t requested,
                                 const std::vector<std::pair<std::string, std::string>>& params) {
  ProtocolAnswer answer;
  answer.version = std::min(requested, kProtocolLatest);
  for (const auto& [name, value] : params) {
    if (name.starts_with("_pq_.")) answer.unrecognized.push_back(name);
  }
  answer.negotiate = answer.version != requested || !answer.unrecognized.empty();
  return answer;
}

size_t CancelSecretSizeFor(uint32_t version) {
  return version >= kProtocol32 ? kCancelSecretSize32 : kCancelSecretSize;
}

}  // namespace pgfleet::protocol
