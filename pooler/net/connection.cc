// Connection I/O primitives.
#include "pooler/net/connection.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

namespace pgfleet::net {

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
  if (!out_.empty() || connecting_) wanted |= EPOLLOUT;
  if (wanted != registered_events_) {
    registered_events_ = wanted;
    loop_.Modify(fd_, this, wanted);
  }
}

Connection::ReadResult Connection::ReadOnce(size_t* n) {
  auto space = in_.PrepareWrite(Buffer::kChunkSize / 2);
  ssize_t got = recv(fd_, space.data(), space.size(), 0);
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
  ssize_t sent = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
  if (sent < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    sent = 0;
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
    ssize_t sent = send(fd_, pending.data(), pending.size(), MSG_NOSIGNAL);
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
    if (recv(fd_, sink, sizeof(sink), MSG_DONTWAIT) <= 0) break;
  }
}

void Connection::CloseSocket() {
  if (fd_ < 0) return;
  loop_.Remove(fd_);
  close(fd_);
  fd_ = -1;
  in_.Consume(in_.size());
  out_.Consume(out_.size());
  in_.ReleaseIfEmpty();
  out_.ReleaseIfEmpty();
}

}  // namespace pgfleet::net
