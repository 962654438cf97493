// The pod's hand-off sockets of one worker.
#include "pooler/worker/handoff_channel.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/net/fd_passing.h"

namespace pgfleet::worker {

class HandoffChannel::Listener final : public net::IoHandler {
 public:
  Listener(HandoffChannel& channel, int fd) : channel_(channel), fd_(fd) {}
  ~Listener() override { close(fd_); }
  void OnIoEvent(uint32_t /*events*/) override { channel_.Accept(); }
  int fd() const { return fd_; }

 private:
  HandoffChannel& channel_;
  int fd_;
};

class HandoffChannel::Inbound final : public net::IoHandler {
 public:
  Inbound(HandoffChannel& channel, int fd) : channel_(channel), fd_(fd) {}
  ~Inbound() override { close(fd_); }
  void OnIoEvent(uint32_t /*events*/) override { channel_.Read(this); }
  int fd() const { return fd_; }

 private:
  HandoffChannel& channel_;
  int fd_;
};

HandoffChannel::HandoffChannel(net::EventLoop& loop, std::string runtime_dir,
                               uint32_t local_peer_id, MessageCallback on_message)
    : loop_(loop),
      runtime_dir_(std::move(runtime_dir)),
      on_message_(std::move(on_message)),
      path_(SocketPath(runtime_dir_, local_peer_id)) {}

HandoffChannel::~HandoffChannel() {
  for (auto& [inbound, owned] : inbound_) loop_.Remove(inbound->fd());
  if (listener_ != nullptr) {
    loop_.Remove(listener_->fd());
    unlink(path_.c_str());
  }
  for (auto& [worker, fd] : outbound_) close(fd);
}

std::string HandoffChannel::SocketPath(const std::string& runtime_dir, uint32_t local_peer_id) {
  return absl::StrCat(runtime_dir, "/handoff-", local_peer_id, ".sock");
}

absl::Status HandoffChannel::Start() {
  auto fd = net::ListenSeqpacket(path_);
  if (!fd.ok()) return fd.status();
  listener_ = std::make_unique<Listener>(*this, *fd);
  return loop_.Add(*fd, listener_.get(), EPOLLIN);
}

void HandoffChannel::Accept() {
  while (true) {
    auto fd = net::AcceptSeqpacket(listener_->fd());
    if (!fd.ok() || *fd < 0) return;
    auto inbound = std::make_unique<Inbound>(*this, *fd);
    if (!loop_.Add(*fd, inbound.get(), EPOLLIN | EPOLLRDHUP).ok()) continue;
    Inbound* raw = inbound.get();
    inbound_.emplace(raw, std::move(inbound));
  }
}

void HandoffChannel::Read(Inbound* inbound) {
  while (true) {
    auto received =
        net::ReceiveWithFd(inbound->fd(), pool::kMaxHandoffMessageBytes, receive_buffer_);
    if (!received.ok()) {
      PGFLEET_LOG(kWarning, "handoff_receive_failed",
                  "error=", base::LogQuote(base::Sv(received.status().message())));
      Drop(inbound);
      return;
    }
    if (!received->has_value()) return;  // nothing more for now
    net::Received message = **std::move(received);
    if (message.bytes.empty() && message.fd < 0) {  // the sibling closed its end
      Drop(inbound);
      return;
    }
    auto decoded = pool::DecodeHandoff(message.bytes);
    if (!decoded.ok()) {
      PGFLEET_LOG(kWarning, "handoff_malformed",
                  "error=", base::LogQuote(base::Sv(decoded.status().message())));
      if (message.fd >= 0) close(message.fd);
      continue;
    }
    on_message_(*std::move(decoded), message.fd);
  }
}

void HandoffChannel::Drop(Inbound* inbound) {
  loop_.Remove(inbound->fd());
  auto it = inbound_.find(inbound);
  if (it == inbound_.end()) return;
  // The callback stack may still hold it: delete after the batch.
  struct Deferred final : net::DeferredDeletable {
    std::unique_ptr<Inbound> inbound;
  };
  auto deferred = std::make_unique<Deferred>();
  deferred->inbound = std::move(it->second);
  inbound_.erase(it);
  loop_.DeferredDelete(std::move(deferred));
}

bool HandoffChannel::Send(uint32_t worker, const pool::HandoffMessage& message, int fd) {
  const std::string bytes = pool::EncodeHandoff(message);
  // One retry with a fresh connection: the sibling may have restarted since we last sent.
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto it = outbound_.find(worker);
    if (it == outbound_.end()) {
      auto connected = net::ConnectSeqpacket(SocketPath(runtime_dir_, worker));
      if (!connected.ok()) return false;
      it = outbound_.emplace(worker, *connected).first;
    }
    const absl::Status sent = net::SendWithFd(it->second, bytes, fd);
    if (sent.ok()) return true;
    if (absl::IsUnavailable(sent)) return false;  // its queue is full: the caller keeps the server
    close(it->second);
    outbound_.erase(it);
  }
  return false;
}

}  // namespace pgfleet::worker
