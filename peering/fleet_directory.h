// Where the other pods' peering endpoints are. With pgfleet-controller, its Directory maps each
// pod's id block (peer id >> 8) to the pod's advertised address, so a cancel key names its pod.
// Without one, keys carry block 0 and name no pod: such a key goes to every pod known from
// peering.static_peers and the headless Service's DNS records, and only its owner acts on it.
// Used on the worker's loop thread only (DnsDiscovery posts its results there).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "pooler/net/event_loop.h"

namespace pgfleet::peering {

class FleetDirectory {
 public:
  // `own_address`: this pod's advertised endpoint, never a forwarding target.
  explicit FleetDirectory(std::string own_address) : own_address_(std::move(own_address)) {}

  // The controller's table: block -> endpoints (two pods share a block only in the window after a
  // controller restart; a key then goes to both, and only its owner acts on it).
  void SetPods(std::map<uint32_t, std::set<std::string>> pods) { pods_ = std::move(pods); }
  void SetStaticPeers(std::vector<std::string> peers);
  void SetDiscoveredPeers(std::vector<std::string> peers);

  // Endpoints of the pod that holds `block` (block != 0), not counting this pod.
  std::vector<std::string> EndpointsForBlock(uint32_t block) const;
  // Every other pod: the controller's, the static and the discovered ones.
  std::vector<std::string> AllOtherPods() const;
  const std::string& own_address() const { return own_address_; }

 private:
  std::string own_address_;
  std::map<uint32_t, std::set<std::string>> pods_;
  std::set<std::string> static_peers_;
  std::set<std::string> discovered_;
};

// Resolves a headless Service name every `interval` on its own thread (getaddrinfo blocks, the
// loop must not) and posts the list of "ip:port" to `on_update` on the loop.
class DnsDiscovery {
 public:
  DnsDiscovery(net::EventLoop& loop, std::string name, int port, absl::Duration interval,
               std::function<void(std::vector<std::string>)> on_update);
  ~DnsDiscovery();
  void Start();

 private:
  void Run();

  net::EventLoop& loop_;
  std::string name_;
  int port_;
  absl::Duration interval_;
  std::function<void(std::vector<std::string>)> on_update_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace pgfleet::peering
