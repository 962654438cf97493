// The states a client and a server connection move through, the moves that are legal, and the
// per-state lists that hold them (docs/architecture.md, "Connection state machines").
//
// Every move goes through StateLists::Move, which checks it against the one transition table of
// its connection kind: an impossible move is a bug (PGFLEET_BUG: it aborts debug and sanitizer
// builds, and is counted and logged in release builds, where the connection still lands in the
// list of its new state so nothing is lost). The worker holds the lists of the states before a
// pool (startup, auth, auth query, admin); each pool holds the lists of the states inside it.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "pooler/base/check.h"
#include "pooler/base/intrusive_list.h"

namespace pgfleet::pool {

enum class ClientState {
  kStartup,        // reading the startup packet (or SSLRequest/CancelRequest)
  kAuth,           // password exchange in progress
  kAuthQuery,      // waiting for auth_query's answer
  kSettingsCheck,  // authenticated, its startup settings being tried on a server
  kWelcome,        // authenticated, waiting for the pool's first server to learn its parameters
  kIdle,           // logged in, no server, nothing to send
  kWaiting,        // has messages queued and waits for a server
  kActive,         // linked to a server
  kAdmin,          // logged in to the admin console (no server, ever)
  kClosed,         // on no list; deleted after the event batch
};
inline constexpr size_t kClientStateCount = static_cast<size_t>(ClientState::kClosed) + 1;
std::string_view ClientStateName(ClientState state);
// The client transition table: true when a client in `from` may move to `to`.
bool IsLegalClientMove(ClientState from, ClientState to);

enum class ServerState {
  kConnecting,  // TCP/unix connect in progress
  kLogin,       // startup and authentication
  kIdle,        // in the pool, unlinked
  kActive,      // linked to a client
  kTesting,     // running server_check_query, server_reset_query or auth_query, unlinked
  kCanceling,   // released while a cancel it was sent is still in flight; not reusable yet
  kDraining,    // its client went away mid-query: its answers are dropped until it is clean
  kListening,   // the pool's LISTEN hub holds it: it listens for clients (listen_hub.h)
  kClosed,      // on no list; deleted after the event batch
};
inline constexpr size_t kServerStateCount = static_cast<size_t>(ServerState::kClosed) + 1;
std::string_view ServerStateName(ServerState state);
// The server transition table.
bool IsLegalServerMove(ServerState from, ServerState to);

// Overloads so StateLists finds its kind's table and names.
inline bool IsLegalMove(ClientState from, ClientState to) { return IsLegalClientMove(from, to); }
inline bool IsLegalMove(ServerState from, ServerState to) { return IsLegalServerMove(from, to); }
inline std::string_view StateName(ClientState state) { return ClientStateName(state); }
inline std::string_view StateName(ServerState state) { return ServerStateName(state); }

// One intrusive list per state that this owner holds. `Conn` derives from base::ListNode and
// has state() and set_state(); a connection is on exactly one list (none once closed).
template <typename Conn, typename State, size_t kCount>
class StateLists {
 public:
  // The states whose connections this owner keeps; moving into any other is a bug.
  explicit StateLists(std::initializer_list<State> held) {
    for (State state : held) held_[Index(state)] = true;
  }
  StateLists(const StateLists&) = delete;
  StateLists& operator=(const StateLists&) = delete;

  // A new connection, in its initial state, joins its list.
  void Add(Conn* conn) {
    PGFLEET_BUG(held_[Index(conn->state())],
                "connection added in a state this owner does not hold");
    lists_[Index(conn->state())].PushBack(conn);
  }

  // The transition function: takes `conn` off whichever list holds it (this owner's or another's)
  // and puts it on the list of `to` (`front`: at the head, as idle servers go, most recently used
  // first). kClosed puts it on none.
  void Move(Conn* conn, State to, bool front = false) {
    PGFLEET_BUG(IsLegalMove(conn->state(), to), "impossible connection state move");
    PGFLEET_BUG(to == State::kClosed || held_[Index(to)],
                "connection moved to a state its owner does not hold");
    base::IntrusiveList<Conn>::RemoveFromOwner(conn);
    conn->set_state(to);
    if (to == State::kClosed) return;
    if (front) {
      lists_[Index(to)].PushFront(conn);
    } else {
      lists_[Index(to)].PushBack(conn);
    }
  }

  const base::IntrusiveList<Conn>& operator[](State state) const { return lists_[Index(state)]; }
  // The connections in `states`, in list order, copied so the caller may move or close them
  // while it walks.
  std::vector<Conn*> In(std::initializer_list<State> states) const {
    std::vector<Conn*> out;
    for (State state : states) {
      const auto& list = lists_[Index(state)];
      for (Conn* conn = list.front(); conn != nullptr; conn = list.Next(conn)) out.push_back(conn);
    }
    return out;
  }
  size_t size(State state) const { return lists_[Index(state)].size(); }
  // Connections on all of this owner's lists.
  size_t total() const {
    size_t n = 0;
    for (const auto& list : lists_) n += list.size();
    return n;
  }

 private:
  static size_t Index(State state) { return static_cast<size_t>(state); }

  std::array<base::IntrusiveList<Conn>, kCount> lists_;
  std::array<bool, kCount> held_{};
};

}  // namespace pgfleet::pool
