// Cross-pod endpoint lookup and DNS discovery.
#include "peering/fleet_directory.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "pooler/base/log.h"

namespace pgfleet::peering {

void FleetDirectory::SetStaticPeers(std::vector<std::string> peers) {
  static_peers_ = std::set<std::string>(peers.begin(), peers.end());
}

void FleetDirectory::SetDiscoveredPeers(std::vector<std::string> peers) {
  discovered_ = std::set<std::string>(peers.begin(), peers.end());
}

std::vector<std::string> FleetDirectory::EndpointsForBlock(uint32_t block) const {
  std::vector<std::string> out;
  auto it = pods_.find(block);
  if (it == pods_.end()) return out;
  for (const auto& address : it->second) {
    if (address != own_address_) out.push_back(address);
  }
  return out;
}

std::vector<std::string> FleetDirectory::AllOtherPods() const {
  std::set<std::string> all = static_peers_;
  all.insert(discovered_.begin(), discovered_.end());
  for (const auto& [block, addresses] : pods_) all.insert(addresses.begin(), addresses.end());
  all.erase(own_address_);
  all.erase("");
  return std::vector<std::string>(all.begin(), all.end());
}

DnsDiscovery::DnsDiscovery(net::EventLoop& loop, std::string name, int port,
                           absl::Duration interval,
                           std::function<void(std::vector<std::string>)> on_update)
    : loop_(loop),
      name_(std::move(name)),
      port_(port),
      interval_(interval),
      on_update_(std::move(on_update)) {}

DnsDiscovery::~DnsDiscovery() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void DnsDiscovery::Start() {
  thread_ = std::thread([this] { Run(); });
}

void DnsDiscovery::Run() {
  while (!stop_) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* result = nullptr;
    std::vector<std::string> peers;
    const int rc = getaddrinfo(name_.c_str(), nullptr, &hints, &result);
    if (rc == 0) {
      for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
        char host[INET6_ADDRSTRLEN] = {};
        if (ai->ai_family == AF_INET) {
          inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr, host,
                    sizeof(host));
          peers.push_back(absl::StrCat(host, ":", port_));
        } else if (ai->ai_family == AF_INET6) {
          inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr, host,
                    sizeof(host));
          peers.push_back(absl::StrCat("[", host, "]:", port_));
        }
      }
      freeaddrinfo(result);
      auto update = on_update_;
      loop_.Post([update, peers = std::move(peers)]() mutable { update(std::move(peers)); });
    } else {
      PGFLEET_LOG(kDebug, "peer_discovery_failed", "name=", name_,
                  " error=", base::LogQuote(gai_strerror(rc)));
    }
    // Sleep in short steps so the destructor does not wait a whole interval.
    for (absl::Duration slept; slept < interval_ && !stop_; slept += absl::Milliseconds(100)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace pgfleet::peering
