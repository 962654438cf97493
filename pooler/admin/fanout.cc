// Pod-wide gathering over gRPC.
#include "pooler/admin/fanout.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "peering/grpc_callback_threads.h"

namespace pgfleet::admin {
namespace {

template <typename Request, typename Reply>
struct RemoteCall {
  grpc::ClientContext context;
  Request request;
  Reply reply;
};

}  // namespace

template <typename Reply>
struct PodFanout::Gather {
  std::vector<PeerAnswer<Reply>> answers;
  int pending = 0;
  std::function<void(std::vector<PeerAnswer<Reply>>)> done;

  void Answered() {
    if (--pending == 0) done(std::move(answers));
  }
};

PodFanout::PodFanout(net::EventLoop& loop, const peering::PeerDirectory* peers,
                     uint32_t own_peer_id, LocalWorker local)
    : loop_(loop),
      peers_(peers),
      own_peer_id_(own_peer_id),
      local_(std::move(local)),
      shared_(std::make_shared<Shared>()),
      alive_(std::make_shared<bool>(true)) {
  peering::PinGrpcCallbackThreads();
}

PodFanout::~PodFanout() {
  alive_.reset();
  std::vector<std::shared_ptr<grpc::ClientContext>> in_flight;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->closed = true;
    in_flight = shared_->contexts;  // keeps them alive while we cancel
  }
  for (const auto& context : in_flight) context->TryCancel();
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->idle.wait_for(lock, std::chrono::seconds(5), [this] { return shared_->in_flight == 0; });
}

std::vector<uint32_t> PodFanout::Siblings() {
  std::vector<uint32_t> siblings;
  if (peers_ == nullptr) return siblings;
  for (uint32_t id : peers_->ListPeers()) {
    if (id != own_peer_id_) siblings.push_back(id);
  }
  // Forget channels of workers whose socket is gone (exited; ids are never reused while alive).
  for (auto it = stubs_.begin(); it != stubs_.end();) {
    if (std::find(siblings.begin(), siblings.end(), it->first) == siblings.end()) {
      stubs_.erase(it++);
    } else {
      ++it;
    }
  }
  return siblings;
}

peering::v1::Peering::Stub* PodFanout::StubFor(uint32_t peer_id) {
  auto it = stubs_.find(peer_id);
  if (it != stubs_.end()) return it->second.get();
  auto channel = grpc::CreateChannel(absl::StrCat("unix:", peers_->SocketPathFor(peer_id)),
                                     grpc::InsecureChannelCredentials());
  auto stub = peering::v1::Peering::NewStub(channel);
  auto* raw = stub.get();
  stubs_.emplace(peer_id, std::move(stub));
  return raw;
}

namespace {

// Starts one call to a sibling; its answer lands in gather->answers[index] on the loop thread.
template <typename Request, typename Reply, typename Gather, typename Shared, typename Start>
void CallSibling(net::EventLoop& loop, const std::shared_ptr<Shared>& shared,
                 const std::weak_ptr<bool>& alive, const std::shared_ptr<Gather>& gather,
                 size_t index, const Request& request, absl::Duration deadline,
                 const std::function<void(grpc::ClientContext*)>& authorize, Start start) {
  auto call = std::make_shared<RemoteCall<Request, Reply>>();
  call->request = request;
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  if (authorize) authorize(&call->context);
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    ++shared->in_flight;
    shared->contexts.push_back(std::shared_ptr<grpc::ClientContext>(call, &call->context));
  }
  net::EventLoop* loop_ptr = &loop;
  start(&call->context, &call->request, &call->reply,
        [shared, alive, gather, index, call, loop_ptr](grpc::Status status) {
          std::lock_guard<std::mutex> lock(shared->mu);
          std::erase_if(shared->contexts,
                        [&call](const auto& c) { return c.get() == &call->context; });
          if (!shared->closed) {
            loop_ptr->Post([alive, gather, index, call, status] {
              if (alive.expired()) return;
              auto& answer = gather->answers[index];
              answer.ok = status.ok();
              if (status.ok()) {
                answer.reply = std::move(call->reply);
              } else {
                answer.error = status.error_message();
              }
              gather->Answered();
            });
          }
          --shared->in_flight;
          shared->idle.notify_all();
        });
}

}  // namespace

void PodFanout::GatherStats(const peering::v1::GetWorkerStatsRequest& request,
                            absl::Duration deadline, std::function<void(StatsAnswers)> done) {
  using Reply = peering::v1::WorkerStats;
  const std::vector<uint32_t> siblings = Siblings();
  auto gather = std::make_shared<Gather<Reply>>();
  gather->answers.resize(siblings.size() + 1);
  gather->pending = static_cast<int>(siblings.size()) + 1;
  gather->done = std::move(done);
  gather->answers[0].peer_id = own_peer_id_;
  for (size_t i = 0; i < siblings.size(); ++i) {
    gather->answers[i + 1].peer_id = siblings[i];
    auto* stub = StubFor(siblings[i]);
    CallSibling<peering::v1::GetWorkerStatsRequest, Reply>(
        loop_, shared_, alive_, gather, i + 1, request, deadline, authorize_,
        [stub](grpc::ClientContext* c, const peering::v1::GetWorkerStatsRequest* req, Reply* reply,
               std::function<void(grpc::Status)> cb) {
          stub->async()->GetWorkerStats(c, req, reply, std::move(cb));
        });
  }
  // Our own answer also goes through the loop, so `done` never runs inside this call.
  std::weak_ptr<bool> alive = alive_;
  loop_.Post([this, alive, gather, request] {
    if (alive.expired()) return;
    local_.stats(request, &gather->answers[0].reply);
    gather->answers[0].ok = true;
    gather->Answered();
  });
}

void PodFanout::Broadcast(const peering::v1::AdminCommandRequest& request, absl::Duration deadline,
                          std::function<void(CommandAnswers)> done) {
  using Reply = peering::v1::AdminCommandReply;
  const std::vector<uint32_t> siblings = Siblings();
  auto gather = std::make_shared<Gather<Reply>>();
  gather->answers.resize(siblings.size() + 1);
  gather->pending = static_cast<int>(siblings.size()) + 1;
  gather->done = std::move(done);
  gather->answers[0].peer_id = own_peer_id_;
  for (size_t i = 0; i < siblings.size(); ++i) {
    gather->answers[i + 1].peer_id = siblings[i];
    auto* stub = StubFor(siblings[i]);
    CallSibling<peering::v1::AdminCommandRequest, Reply>(
        loop_, shared_, alive_, gather, i + 1, request, deadline, authorize_,
        [stub](grpc::ClientContext* c, const peering::v1::AdminCommandRequest* req, Reply* reply,
               std::function<void(grpc::Status)> cb) {
          stub->async()->AdminCommand(c, req, reply, std::move(cb));
        });
  }
  std::weak_ptr<bool> alive = alive_;
  loop_.Post([this, alive, gather, request] {
    if (alive.expired()) return;
    local_.command(request, [alive, gather](const Reply& reply) {
      if (alive.expired()) return;
      gather->answers[0].reply = reply;
      gather->answers[0].ok = true;
      gather->Answered();
    });
  });
}

}  // namespace pgfleet::admin
