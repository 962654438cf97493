// The worker's periodic sweep.
#include "pooler/pool/janitor.h"

#include "pooler/pool/pool.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {
namespace {
constexpr absl::Duration kInterval = absl::Milliseconds(100);
}  // namespace

Janitor::Janitor(WorkerContext& context, const ClientLists& login_clients, CancelHandler& cancels,
                 const PoolMap& pools)
    : context_(context), login_clients_(login_clients), cancels_(cancels), pools_(pools) {
  timer_ = context_.loop().RunEvery(kInterval, [this] { Sweep(context_.loop().now()); });
}

Janitor::~Janitor() { context_.loop().CancelTimer(timer_); }

void Janitor::Sweep(absl::Time now) {
  ExpireLogins(now);
  cancels_.ExpireStale(now);
  for (auto& [key, pool] : pools_) pool->Maintain(now);
}

void Janitor::ExpireLogins(absl::Time now) {
  const auto timeout = context_.config().pool.client_login_timeout;
  if (timeout <= absl::ZeroDuration()) return;
  for (ClientConn* c :
       login_clients_.In({ClientState::kStartup, ClientState::kAuth, ClientState::kAuthQuery})) {
    if (now - c->connected_at() > timeout && !c->closed()) {
      c->Fatal(protocol::sqlstate::kProtocolViolation, "client_login_timeout");
    }
  }
}

}  // namespace pgfleet::pool
