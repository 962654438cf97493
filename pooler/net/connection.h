// A non-blocking socket registered with the loop, with an input buffer (bytes received, not yet
// relayed) and an output buffer (bytes the socket has not taken yet). Sending goes straight to
// the socket while nothing is queued, so the common path copies nothing.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "pooler/net/buffer.h"
#include "pooler/net/event_loop.h"
#include "pooler/net/tls.h"

namespace pgfleet::net {

class Connection : public IoHandler, public DeferredDeletable {
 public:
  enum class ReadResult { kData, kWouldBlock, kEof, kError };

  Connection(EventLoop& loop, int fd);
  ~Connection() override;

  int fd() const { return fd_; }
  bool closed() const { return fd_ < 0; }
  EventLoop& loop() { return loop_; }
  Buffer& in() { return in_; }
  Buffer& out() { return out_; }

  // Registers with the loop for reading (and for writing when `connecting`).
  [[nodiscard]] absl::Status Register(bool connecting = false);

  // One recv() into in(); `*n` is the number of bytes read for kData.
  ReadResult ReadOnce(size_t* n);

  // Writes `data` (after whatever is queued in out()); queues what the socket does not take and
  // arms EPOLLOUT. Returns false when the socket failed (the caller closes).
  [[nodiscard]] bool Send(std::span<const uint8_t> data);
  // Writes queued bytes. Returns false on socket failure.
  [[nodiscard]] bool Flush();
  bool has_pending_output() const { return !out_.empty(); }

  // Stops or resumes reading (backpressure); changes epoll interest only when it must.
  void SetReadEnabled(bool enabled);
  bool read_enabled() const { return read_enabled_; }

  // Reads and drops whatever the peer already sent (bounded). Closing a socket with unread input
  // makes Linux send RST, which can destroy a FATAL we just wrote before the client reads it.
  void DiscardPendingInput();

  // Deregisters and closes the fd; buffers are released. Safe to call twice.
  void CloseSocket();

  // TLS: switches the socket to TLS after the plain-text negotiation (SSLRequest and its one-byte
  // answer); nothing may be queued in either direction. ReadOnce/Send/Flush then carry
  // plaintext through the session. `verify_host` as in TlsSession::Create.
  [[nodiscard]] absl::Status StartTls(std::shared_ptr<const TlsContext> context,
                                      std::string_view verify_host = {});
  enum class HandshakeStatus { kDone, kInProgress, kFailed };
  // Drives the handshake from OnIoEvent; on kFailed, tls()->error() says why.
  HandshakeStatus ContinueTlsHandshake();
  // Null until StartTls.
  const TlsSession* tls() const { return tls_.get(); }
  bool tls_established() const { return tls_ != nullptr && tls_->established(); }

  uint64_t bytes_received() const { return bytes_received_; }
  uint64_t bytes_sent() const { return bytes_sent_; }

 protected:
  void UpdateInterest();
  ReadResult ReadTls(size_t* n);
  // Writes through TLS; returns bytes taken, or -1 when the session failed.
  ssize_t WriteTls(std::span<const uint8_t> data);

  EventLoop& loop_;
  int fd_;
  Buffer in_;
  Buffer out_;
  bool read_enabled_ = true;
  bool connecting_ = false;
  uint32_t registered_events_ = 0;
  uint64_t bytes_received_ = 0;
  uint64_t bytes_sent_ = 0;
  std::unique_ptr<TlsSession> tls_;
  // The session needs the socket writable (handshake, or a write that must be retried).
  bool tls_wants_write_ = false;
};

}  // namespace pgfleet::net
