// The worker's end of the pod's hand-off sockets (docs/architecture.md, "One pool per pod"): it
// listens on <runtime_dir>/handoff-<local peer id>.sock (SOCK_SEQPACKET: one message per datagram,
// a server's socket attached with SCM_RIGHTS), passes what siblings send to the registry, and
// sends to siblings over connections it opens on first use.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "pooler/handoff/handoff_message.h"
#include "pooler/handoff/server_mover.h"
#include "pooler/net/event_loop.h"

namespace pgfleet::worker {

class HandoffChannel final : public pool::ServerMover {
 public:
  // `on_message(message, fd)` runs on the loop thread; it owns `fd` (-1 when none came).
  using MessageCallback = std::function<void(pool::HandoffMessage message, int fd)>;

  HandoffChannel(net::EventLoop& loop, std::string runtime_dir, uint32_t local_peer_id,
                 MessageCallback on_message);
  ~HandoffChannel() override;

  [[nodiscard]] absl::Status Start();
  bool Send(uint32_t worker, const pool::HandoffMessage& message, int fd) override;

  static std::string SocketPath(const std::string& runtime_dir, uint32_t local_peer_id);

 private:
  class Listener;
  class Inbound;
  void Accept();
  void Read(Inbound* inbound);
  void Drop(Inbound* inbound);

  net::EventLoop& loop_;
  std::string runtime_dir_;
  MessageCallback on_message_;
  std::string path_;
  std::unique_ptr<Listener> listener_;
  absl::flat_hash_map<Inbound*, std::unique_ptr<Inbound>> inbound_;
  absl::flat_hash_map<uint32_t, int> outbound_;  // sibling -> connected socket
  std::string receive_buffer_;                   // every inbound message, one at a time
};

}  // namespace pgfleet::worker
