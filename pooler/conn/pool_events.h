// What a connection reads of its pool and tells it: the one seam between the connection shells
// (pooler/conn) and the pool core (pooler/pool, docs/architecture.md "Rooms of the worker"). Pool
// implements it; no connection includes pool.h. What the connections read on every message (the
// database, the mode, the counters) are plain fields of this base, set by the pool, so reading
// them costs what it cost before the seam; what they report are the pool's events.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "pooler/budget/pod_server_counts.h"
#include "pooler/config/config.h"
#include "pooler/conn/linked_client.h"
#include "pooler/conn/server_login.h"
#include "pooler/conn/stats.h"
#include "pooler/conn/worker_context.h"
#include "pooler/listen/listen_hub.h"
#include "pooler/relay/relay.h"

namespace pgfleet::pool {

class ClientConn;
class LinkedClient;
class ServerConn;

// max_pinned_servers for one pool (relay.h's PinLimit), and pins counted by the reason that
// first pinned each client's server. The limit is the pod's: every worker's pins of the pool are
// counted in the pod's shared counts under the pool's pin key (a dead worker's returned by the
// supervisor), so N workers never pin N times the limit; this worker's own count feeds SHOW POOLS
// and the metrics, which add up over the workers.
class PinnedServers final : public PinLimit {
 public:
  PinnedServers(budget::PodServerCounts* pod, std::string key_text)
      : pod_(pod), key_text_(std::move(key_text)) {}
  bool MayPin() const override;
  int limit() const override { return limit_; }
  void OnPinChanged(bool pinned, uint32_t pin_mask) override;
  void set_limit(int limit) { limit_ = limit; }
  int pinned() const { return pinned_; }
  uint64_t pins_total(PinReason reason) const { return pins_total_[static_cast<int>(reason)]; }

 private:
  // The pod's count key, interned on first use (the worker has attached the pod's region by the
  // time a client can pin); nullopt when the table is full: then only this worker counts.
  std::optional<budget::PodServerCounts::Key> PodKey() const;

  budget::PodServerCounts* pod_;
  std::string key_text_;
  mutable std::optional<budget::PodServerCounts::Key> key_;
  mutable bool key_known_ = false;
  int pinned_ = 0;
  int limit_ = 1;
  std::array<uint64_t, kPinReasonCount> pins_total_{};
};

class PoolEvents {
 public:
  PoolEvents(const PoolEvents&) = delete;
  PoolEvents& operator=(const PoolEvents&) = delete;

  // --- what the connections read ---
  const config::DatabaseConfig& db() const { return db_; }
  const std::string& user() const { return user_; }
  // The user pgfleet logs in to the server as (db.user when forced).
  const std::string& server_user() const { return db_.user.empty() ? user_ : db_.user; }
  config::PoolMode mode() const { return mode_; }
  // Named prepared statements are renamed and tracked per server (max_prepared_statements > 0,
  // not session mode, where a client keeps its server and its statements).
  bool tracks_prepared_statements() const { return relay_settings_.track_prepared; }
  // What every relay of this pool's servers works with.
  const RelaySettings& relay_settings() const { return relay_settings_; }
  WorkerContext& context() const { return context_; }
  const PinnedServers& pinned_servers() const { return pins_; }
  PinnedServers& pinned_servers_limit() { return pins_; }
  ServerCredentials& credentials() { return credentials_; }
  PoolStats& stats() { return stats_; }
  // Idle clients' LISTEN/UNLISTEN go to the hub (session_state: track in transaction or
  // statement pooling) instead of pinning a server each.
  bool listen_hub_enabled() const { return relay_settings_.session == SessionTracking::kTrack; }
  ListenHub& listen_hub() { return hub_; }
  const ListenHub& listen_hub() const { return hub_; }

  // --- what a client tells its pool ---
  // An authenticated client joins: welcomed at once when the server parameters are known,
  // otherwise after the first server logs in.
  virtual void AddClient(ClientConn* client) = 0;
  // The check of an added client's startup settings answered (ServerConn::StartSettingsCheck).
  virtual void OnStartupSettingsChecked(ClientConn* client, const LookupAnswer& answer) = 0;
  // The client has messages to send: link it to a server now or queue it in arrival order.
  virtual void RequestServer(ClientConn* client) = 0;
  // The client is going away; unlinks its server and releases it, or, mid-query, drains it.
  virtual void RemoveClient(ClientConn* client) = 0;
  // A waiting client's queued query was cancelled and it has nothing else queued: it leaves the
  // queue (queued_cancel.h).
  virtual void LeaveQueue(ClientConn* client) = 0;
  // After every change to the LISTEN hub: sends what it wrote to its server, gives its server
  // back when nobody listens, asks for one when it needs one, and hands out LISTEN answers.
  virtual void SettleHub() = 0;

  // --- what a server tells its pool ---
  virtual void OnServerConnected(ServerConn* server) = 0;
  // Login finished: learn parameters, welcome waiting clients, serve the queue.
  virtual void OnServerReady(ServerConn* server) = 0;
  // Login failed with a server ErrorResponse (`error` is the whole message, to pass on).
  virtual void OnServerLoginFailed(ServerConn* server, std::span<const uint8_t> error,
                                   bool fatal_for_clients) = 0;
  // A logged-in server reported in_hot_standby (a promotion).
  virtual void OnHotStandbyReport(ServerConn* server, bool in_hot_standby) = 0;
  // A server failed a client's write as read-only (25006).
  virtual void OnReadOnlyError(ServerConn* server) = 0;
  // The linked transaction is over (release rule met) or a hidden check/reset finished.
  virtual void ReleaseServer(ServerConn* server) = 0;
  // The server socket is gone; unlink and forget it.
  virtual void RemoveServer(ServerConn* server) = 0;
  // A server finished a test/reset query or a cancel and may serve again.
  virtual void MakeIdle(ServerConn* server) = 0;
  // A draining server read more of what it owes, or a cancel for it landed.
  virtual void ContinueDrain(ServerConn* server) = 0;
  // A message from the LISTEN hub's server (ServerConn in kListening).
  virtual void OnHubServerMessage(uint8_t type, std::span<const uint8_t> body) = 0;
  // The UNLISTENs `client`'s finished transaction committed on its server
  // (ClientSession::unlistened) stop the hub's deliveries too.
  virtual void ApplyRelayedUnlistens(LinkedClient* client) = 0;
  // A server went to a sibling: off the lists and deleted; its room moved with it.
  virtual void ForgetHandedOver(ServerConn* server) = 0;

 protected:
  PoolEvents(WorkerContext& context, config::DatabaseConfig db, std::string user,
             budget::PodServerCounts* pod)
      : context_(context),
        db_(std::move(db)),
        user_(std::move(user)),
        mode_(context_.config().EffectivePoolMode(db_, user_)),
        pins_(pod, budget::PodServerCounts::PinKeyText(db_.name, user_)) {}
  ~PoolEvents() = default;

  WorkerContext& context_;
  config::DatabaseConfig db_;
  std::string user_;
  config::PoolMode mode_;
  ServerCredentials credentials_;
  PoolStats stats_;
  RelaySettings relay_settings_;
  PinnedServers pins_;
  ListenHub hub_;
};

}  // namespace pgfleet::pool
