// Outbound cancel requests.
#include "pooler/cancel/cancel_request.h"

#include <sys/epoll.h>

#include "pooler/base/log.h"
#include "pooler/base/strings.h"
#include "pooler/conn/server_conn.h"
#include "pooler/conn/stats.h"
#include "pooler/net/socket.h"
#include "pooler/protocol/builders.h"

namespace pgfleet::pool {

CancelRequestConn::CancelRequestConn(net::EventLoop& loop, int fd, CancelRequestOwner* handler,
                                     uint64_t server_id, uint64_t link_generation, int attempt,
                                     absl::Time first_started_at)
    : net::Connection(loop, fd),
      handler_(handler),
      server_id_(server_id),
      link_generation_(link_generation),
      started_at_(loop.now()),
      first_started_at_(first_started_at == absl::InfinitePast() ? started_at_ : first_started_at),
      attempt_(attempt) {}

CancelRequestConn::CancelRequestConn(net::EventLoop& loop, int fd, CancelRequestOwner* handler,
                                     uint32_t backend_pid, std::vector<uint8_t> backend_secret)
    : net::Connection(loop, fd),
      handler_(handler),
      server_id_(0),
      link_generation_(0),
      unconditional_(true),
      backend_pid_(backend_pid),
      backend_secret_(std::move(backend_secret)),
      started_at_(loop.now()),
      first_started_at_(started_at_) {}

void CancelRequestConn::OnIoEvent(uint32_t events) {
  if (closed()) return;
  if (!sent_) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
    if (net::PendingSocketError(fd_) != 0) {
      // A linked client's cancel is worth another connection (a listen backlog full for a
      // moment, a proxy restarting): the owner retries with the server's hold kept.
      if (!unconditional_ && handler_->RetryCancel(*this)) {
        return Finish("connect failed, retrying", /*release_hold=*/false);
      }
      return Finish("connect failed");
    }
    connecting_ = false;
    protocol::StringSink sink;
    if (unconditional_) {
      protocol::BuildCancelRequest(sink, backend_pid_, backend_secret_);
    } else {
      ServerConn* server = handler_->FindServer(server_id_);
      if (server == nullptr || server->link_generation() != link_generation_ ||
          !server->query_in_progress()) {
        ++handler_->counters().cancels_dropped;
        return Finish("query already finished");
      }
      protocol::BuildCancelRequest(sink, server->backend_pid(), server->backend_secret());
    }
    sent_ = true;
    const auto& bytes = sink.bytes();
    if (!Send(base::AsBytes(bytes))) {
      return Finish("write failed");
    }
    ++handler_->counters().cancels_sent;
    UpdateInterest();
    return;
  }
  if (events & EPOLLOUT) {
    if (!Flush()) return Finish("write failed");
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    // PostgreSQL answers a cancel by closing the connection once it has signalled the backend.
    size_t n = 0;
    auto result = ReadOnce(&n);
    if (result == ReadResult::kEof || result == ReadResult::kError) return Finish("sent");
    in_.Consume(in_.size());
  }
}

void CancelRequestConn::Finish(std::string_view outcome, bool release_hold) {
  PGFLEET_LOG(kDebug, "cancel_finished", "server=", server_id_, " outcome=", outcome);
  CloseSocket();
  if (release_hold && server_id_ != 0) {
    if (ServerConn* server = handler_->FindServer(server_id_)) server->CancelFinished();
  }
  handler_->Forget(this);
}

}  // namespace pgfleet::pool
