// Passing a socket between processes of one machine: a datagram with at most one file descriptor
// attached (SCM_RIGHTS) over a unix SOCK_SEQPACKET socket, so that workers of one pod can hand an
// idle server connection to a sibling. SEQPACKET keeps message boundaries (one message, one
// recvmsg) and ties the fd to its message, which a stream socket would not. Every socket here is
// non-blocking and close-on-exec; nothing blocks.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pgfleet::net {

// Sends `bytes` as one message with `fd` attached (-1: none) in one sendmsg. The caller keeps its
// own `fd` (the receiver gets a duplicate) and closes it when it is done with it. A full socket
// buffer is UnavailableError with nothing sent; a peer that is gone is an error, never SIGPIPE.
absl::Status SendWithFd(int socket, std::string_view bytes, int fd);

struct Received {
  std::string_view bytes;  // in the caller's buffer, valid until its next receive
  int fd = -1;  // owned by the caller now (close-on-exec); -1 when the message carried none
};
// Receives one message of at most `max_bytes` in one recvmsg, into `buffer`: the caller keeps one
// buffer for all its receives, which is sized once (max_bytes + 1) and then neither allocated nor
// zeroed again. nullopt when none is waiting. A longer message, or more descriptors than fit, is
// an error and the descriptors that came are closed; descriptors beyond the first are closed too
// (a sender here attaches at most one). A peer that has closed reads as a message of zero bytes
// with no fd.
absl::StatusOr<std::optional<Received>> ReceiveWithFd(int socket, size_t max_bytes,
                                                      std::string& buffer);

// A SOCK_SEQPACKET listener at `path` (a stale socket file there is replaced).
absl::StatusOr<int> ListenSeqpacket(const std::string& path);
// Connects to the listener at `path`; unix sockets connect at once or fail (no EINPROGRESS).
absl::StatusOr<int> ConnectSeqpacket(const std::string& path);
// Accepts one connection on `listener`; -1 when none is pending (EAGAIN).
absl::StatusOr<int> AcceptSeqpacket(int listener);

}  // namespace pgfleet::net
