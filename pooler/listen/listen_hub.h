// LISTEN/NOTIFY in transaction pooling without a server per listener (docs/architecture.md,
// "LISTEN hub"): the socket-free decisions. Which idle client messages the hub answers
// (ReadIdleListen), the per-client queue of notifications not yet deliverable
// (NotificationQueue), and the hub itself (ListenHub): the channels a pool's clients listen on in
// this worker, the LISTEN/UNLISTEN commands its one server needs, the answers owed to clients
// whose LISTEN waits for that server, and the fan-out of the server's NotificationResponses.
// The pool does the I/O (pool_listen.cc): it gives the hub a server, sends what the hub wrote,
// feeds it the server's messages and hands answers to clients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "pooler/protocol/byte_sink.h"

namespace pgfleet::pool {

struct ClientStream;

// A client as the hub sees it (ClientConn implements it). The hub never owns one; the pool
// removes a client from the hub (ListenHub::Remove) before it is deleted.
class NotificationListener {
 public:
  virtual ~NotificationListener() = default;
  // The answer to a LISTEN that waited for the hub's server: CommandComplete "LISTEN" and
  // ReadyForQuery, or the server's ErrorResponse and ReadyForQuery. The client reads on.
  virtual void OnListenAnswered(std::span<const uint8_t> answer) = 0;
  // A whole NotificationResponse for `channel`, which the client listens on through the hub.
  virtual void OnNotification(std::string_view channel, std::span<const uint8_t> message) = 0;
};

// What the front of an idle client's input asks of the hub.
struct IdleListen {
  enum class Kind : uint8_t { kNone, kListen, kUnlisten, kUnlistenAll };
  Kind kind = Kind::kNone;
  std::string channel;  // kListen, kUnlisten: as PostgreSQL's parser gives it (case-folded)
  size_t consumed = 0;  // the bytes of the Query message, or of Parse through Sync
  // The extended protocol's answers before the statement's own (ParseComplete, BindComplete,
  // what Describe gets); empty for a simple Query. Sent first, whatever the statement's answer.
  std::string prefix;
};

// kNone unless `data` starts with exactly one LISTEN, UNLISTEN or UNLISTEN * statement
// (PostgreSQL's parser says so) from a client between messages: a whole simple Query of only
// that, or the extended protocol's unnamed statement without parameters as drivers send a
// statement (Parse, Bind, an optional Describe, Execute, Sync: psycopg 3, pgjdbc). In the
// extended case the client's unnamed statement is that statement now (its session bookkeeping is
// updated). Every other form (inside a transaction block, with other statements, pipelined
// batches) goes to a server as before, and pins it.
IdleListen ReadIdleListen(ClientStream& client, std::span<const uint8_t> data,
                          uint32_t max_packet_size);
// What PostgreSQL answers an idle client's LISTEN/UNLISTEN with: CommandComplete and
// ReadyForQuery 'I'.
void BuildListenAnswer(protocol::ByteSink& sink, IdleListen::Kind kind);

// A client's notifications that may not be written yet (it is inside a transaction, waits for
// its LISTEN's answer, or has not read what it was sent). Bounded by kMaxBytes: the oldest are
// dropped first, as a client that never reads must not grow the worker's memory.
class NotificationQueue {
 public:
  // 1 MiB: thousands of typical notifications (PostgreSQL's payload limit is 8000 bytes).
  static constexpr size_t kMaxBytes = 1u << 20;
  // Queues a whole message; returns how many older ones were dropped to make room.
  size_t Push(std::span<const uint8_t> message);
  bool empty() const { return messages_.empty(); }
  size_t size() const { return messages_.size(); }
  // Appends every queued message to `sink`, oldest first, and empties the queue.
  void TakeAll(protocol::ByteSink& sink);

 private:
  std::deque<std::string> messages_;
  size_t bytes_ = 0;
};

class ListenHub {
 public:
  // `listener` listens on `channel`. True when answered now (BuildListenAnswer appended to
  // `answer`): the hub's server already listens there. False when the answer waits for the
  // server (TakeAnswers hands it out): the client must read nothing meanwhile.
  bool Listen(NotificationListener* listener, const std::string& channel,
              protocol::ByteSink& answer);
  // Stops delivery of `channel` (every channel for UnlistenAll) to `listener` at once, as
  // PostgreSQL's UNLISTEN does for its session. Remove is UnlistenAll for a client that leaves,
  // LISTEN pending or not.
  void Unlisten(NotificationListener* listener, std::string_view channel);
  void UnlistenAll(NotificationListener* listener);
  void Remove(NotificationListener* listener) { UnlistenAll(listener); }
  // The UNLISTENs a client's transaction committed on its server (ClientSession::unlistened).
  void ApplyUnlistened(NotificationListener* listener, const std::vector<std::string>& unlistened);

  bool Listens(const NotificationListener* listener, std::string_view channel) const;
  // Whether `listener` listens on (or waits to listen on) any channel, and on how many.
  bool HasChannels(const NotificationListener* listener) const {
    return by_listener_.contains(const_cast<NotificationListener*>(listener));
  }
  size_t ChannelCount(const NotificationListener* listener) const {
    auto it = by_listener_.find(const_cast<NotificationListener*>(listener));
    return it == by_listener_.end() ? 0 : it->second.size();
  }
  // Clients with at least one channel, answered or waiting (SHOW POOLS cl_listening).
  size_t listener_count() const { return by_listener_.size(); }
  size_t channel_count() const { return channels_.size(); }

  // --- the hub's server (the pool's side) ---
  // Someone listens and the hub has no server: the pool gives it one (OnServer) the normal way.
  bool wants_server() const { return !has_server_ && !channels_.empty(); }
  bool has_server() const { return has_server_; }
  // A logged-in, idle server is the hub's now: it LISTENs on every channel.
  void OnServer();
  // A message from the hub's server.
  void OnServerMessage(uint8_t type, std::span<const uint8_t> body);
  // The hub's server is gone: channels are LISTENed again on the next one. Notifications sent
  // meanwhile are lost, as they are for a PostgreSQL session that dies.
  void OnServerLost();
  // True once nobody listens and the server answered everything (its last command was
  // UNLISTEN *): the server is clean, the hub forgets it and the pool takes it back.
  [[nodiscard]] bool TakeServerBack();
  // Queries to send to the hub's server (simple Query messages), and clears them.
  std::string TakeOutput() { return std::exchange(output_, std::string()); }
  // Answers for clients whose LISTEN waited (NotificationListener::OnListenAnswered).
  std::vector<std::pair<NotificationListener*, std::string>> TakeAnswers() {
    return std::exchange(answers_, {});
  }
  // Clients whose LISTEN still waits, taken out of the hub (the pool's query_wait_timeout).
  std::vector<NotificationListener*> TakeWaiting();

  uint64_t notifications_received() const { return notifications_received_; }

 private:
  struct Channel {
    absl::flat_hash_set<NotificationListener*> listeners;  // answered: notifications go to them
    std::vector<NotificationListener*> waiting;            // their LISTEN waits for the server
    uint64_t listen_seq = 0;  // the LISTEN command on the current server; 0 when none
    bool confirmed = false;   // that LISTEN's ReadyForQuery came: the server listens
    bool used() const { return !listeners.empty() || !waiting.empty(); }
  };
  struct Command {
    uint64_t seq = 0;
    std::string channel;  // a LISTEN's; empty for UNLISTEN
    bool listen = false;
    std::string error;  // the server's ErrorResponse (body), if it failed
  };
  void Send(std::string_view sql, std::string channel, bool listen);
  void SendListen(const std::string& name, Channel& channel);
  void OnReady();
  void Deliver(std::span<const uint8_t> body);
  // `listener` no longer waits or listens on `name`; the server UNLISTENs what nobody uses.
  void Drop(NotificationListener* listener, const std::string& name);

  absl::flat_hash_map<std::string, Channel> channels_;
  absl::flat_hash_map<NotificationListener*, absl::flat_hash_set<std::string>> by_listener_;
  std::deque<Command> commands_;  // sent, their ReadyForQuery not yet received
  uint64_t next_seq_ = 1;
  bool has_server_ = false;
  std::string output_;
  std::vector<std::pair<NotificationListener*, std::string>> answers_;
  uint64_t notifications_received_ = 0;
};

}  // namespace pgfleet::pool
