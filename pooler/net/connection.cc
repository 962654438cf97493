// Connection I/O primitives.
#include "pooler/net/connection.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace pgfleet::net {
namespace {

// glibc's send() and recv() are thread cancellation points: in a process with threads (gRPC's)
// each call brackets the syscall with __pthread_enable_asynccancel/__pthread_disable_asynccancel,
// about 2% of a worker's CPU under pgbench -S (perf, bench/RESULTS.md). pgfleet never cancels a
// thread, so the plain syscalls do the same work without that toll.
ssize_t SendPlain(int fd, const void* data, size_t size) {
  return syscall(SYS_sendto, fd, data, size, MSG_NOSIGNAL, nullptr, 0);
}

ssize_t RecvPlain(int fd, void* data, size_t size, int flags) {
  return syscall(SYS_recvfrom, fd, data, size, flags, nullptr, nullptr);
}

}  // namespace

Connection::Connection(EventLoop& loop, int fd) : loop_(loop), fd_(fd) {}

Connection::~Connection() { CloseSocket(); }

absl::Status Connection::Register(bool connecting) {
  connecting_ = connecting;
  registered_events_ = EPOLLIN | EPOLLRDHUP | (connecting ? uint32_t{EPOLLOUT} : 0u);
  return loop_.Add(fd_, this, registered_events_);
}

void Connection::UpdateInterest() {
  if (fd_ < 0) return;
  uint32_t wanted = EPOLLRDHUP;
  if (read_enabled_) wanted |= EPOLLIN;
  if (!out_.empty() || connecting_ || tls_wants_write_) wanted |= EPOLLOUT;
  if (wanted != registered_events_) {
    registered_events_ = wanted;
    loop_.Modify(fd_, this, wanted);
  }
}

Connection::ReadResult Connection::ReadOnce(size_t* n) {
  if (tls_ != nullptr) return ReadTls(n);
  auto space = in_.PrepareWrite(Buffer::kChunkSize / 2);
  ssize_t got = RecvPlain(fd_, space.data(), space.size(), 0);
  if (got > 0) {
    in_.Commit(static_cast<size_t>(got));
    bytes_received_ += static_cast<uint64_t>(got);
    *n = static_cast<size_t>(got);
    return ReadResult::kData;
  }
  in_.ReleaseIfEmpty();
  if (got == 0) return ReadResult::kEof;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return ReadResult::kWouldBlock;
  return ReadResult::kError;
}

bool Connection::Send(std::span<const uint8_t> data) {
  if (fd_ < 0) return false;
  if (data.empty()) return true;
  if (!out_.empty()) {
    out_.Append(data.data(), data.size());
    return true;
  }
  ssize_t sent;
  if (tls_ != nullptr) {
    sent = WriteTls(data);
    if (sent < 0) return false;
  } else {
    sent = SendPlain(fd_, data.data(), data.size());
    if (sent < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      sent = 0;
    }
  }
  bytes_sent_ += static_cast<uint64_t>(sent);
  if (static_cast<size_t>(sent) < data.size()) {
    out_.Append(data.data() + sent, data.size() - static_cast<size_t>(sent));
    UpdateInterest();
  }
  return true;
}

bool Connection::Flush() {
  if (fd_ < 0) return false;
  while (!out_.empty()) {
    auto pending = out_.Readable();
    if (tls_ != nullptr) {
      const ssize_t taken = WriteTls(pending);
      if (taken < 0) return false;
      if (taken == 0) break;
      bytes_sent_ += static_cast<uint64_t>(taken);
      out_.Consume(static_cast<size_t>(taken));
      continue;
    }
    ssize_t sent = SendPlain(fd_, pending.data(), pending.size());
    if (sent < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return false;
    }
    bytes_sent_ += static_cast<uint64_t>(sent);
    out_.Consume(static_cast<size_t>(sent));
  }
  out_.ReleaseIfEmpty();
  UpdateInterest();
  return true;
}

void Connection::SetReadEnabled(bool enabled) {
  if (read_enabled_ == enabled) return;
  read_enabled_ = enabled;
  UpdateInterest();
}

void Connection::DiscardPendingInput() {
  if (fd_ < 0) return;
  uint8_t sink[16384];
  for (int i = 0; i < 64; ++i) {
    if (RecvPlain(fd_, sink, sizeof(sink), MSG_DONTWAIT) <= 0) break;
  }
}

absl::Status Connection::StartTls(std::shared_ptr<const TlsContext> context,
                                  std::string_view verify_host) {
  if (tls_ != nullptr) return absl::FailedPreconditionError("TLS is already active");
  // Plaintext already received would be read as if it had come through TLS (CVE-2021-23222).
  if (!in_.empty() || !out_.empty()) {
    return absl::FailedPreconditionError("unexpected data around the TLS negotiation");
  }
  auto session = TlsSession::Create(std::move(context), fd_, verify_host);
  if (!session.ok()) return session.status();
  tls_ = *std::move(session);
  return absl::OkStatus();
}

Connection::HandshakeStatus Connection::ContinueTlsHandshake() {
  const TlsSession::Result result = tls_->Handshake();
  tls_wants_write_ = result == TlsSession::Result::kWantWrite;
  UpdateInterest();
  switch (result) {
    case TlsSession::Result::kDone:
      return HandshakeStatus::kDone;
    case TlsSession::Result::kWantRead:
    case TlsSession::Result::kWantWrite:
      return HandshakeStatus::kInProgress;
    default:
      return HandshakeStatus::kFailed;
  }
}

Connection::ReadResult Connection::ReadTls(size_t* n) {
  *n = 0;
  // OpenSSL may hold decrypted bytes the socket will never signal: take all of them now.
  do {
    auto space = in_.PrepareWrite(Buffer::kChunkSize / 2);
    size_t got = 0;
    switch (tls_->Read(space, &got)) {
      case TlsSession::Result::kDone:
        in_.Commit(got);
        *n += got;
        bytes_received_ += got;
        break;
      case TlsSession::Result::kWantWrite:
        tls_wants_write_ = true;
        UpdateInterest();
        [[fallthrough]];
      case TlsSession::Result::kWantRead:
        in_.ReleaseIfEmpty();
        return *n > 0 ? ReadResult::kData : ReadResult::kWouldBlock;
      case TlsSession::Result::kEof:
        in_.ReleaseIfEmpty();
        return *n > 0 ? ReadResult::kData : ReadResult::kEof;
      case TlsSession::Result::kError:
        in_.ReleaseIfEmpty();
        return ReadResult::kError;
    }
  } while (tls_->pending() > 0);
  return ReadResult::kData;
}

ssize_t Connection::WriteTls(std::span<const uint8_t> data) {
  size_t written = 0;
  switch (tls_->Write(data, &written)) {
    case TlsSession::Result::kDone:
      if (tls_wants_write_) {
        tls_wants_write_ = false;
        UpdateInterest();
      }
      return static_cast<ssize_t>(written);
    case TlsSession::Result::kWantWrite:
    case TlsSession::Result::kWantRead:
      return 0;
    default:
      return -1;
  }
}

void Connection::CloseSocket() {
  if (fd_ < 0) return;
  if (tls_ != nullptr) tls_->Shutdown();
  loop_.Remove(fd_);
  close(fd_);
  fd_ = -1;
  in_.Consume(in_.size());
  out_.Consume(out_.size());
  in_.ReleaseIfEmpty();
  out_.ReleaseIfEmpty();
  tls_.reset();
  tls_wants_write_ = false;
}

}  // namespace pgfleet::net
