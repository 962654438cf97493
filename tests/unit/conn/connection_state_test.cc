// The connection state machines: the transition tables and the per-state lists that enforce them.
#include "pooler/conn/connection_state.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace pgfleet::pool {
namespace {

// A stand-in connection: StateLists needs only a list node and a state.
struct FakeConn : base::ListNode {
  explicit FakeConn(ClientState initial) : state_(initial) {}
  ClientState state() const { return state_; }
  void set_state(ClientState state) { state_ = state; }
  ClientState state_;
};
using FakeLists = StateLists<FakeConn, ClientState, kClientStateCount>;

constexpr ClientState kAllClientStates[] = {
    ClientState::kStartup, ClientState::kAuth,  ClientState::kAuthQuery,
    ClientState::kWelcome, ClientState::kIdle,  ClientState::kWaiting,
    ClientState::kActive,  ClientState::kAdmin, ClientState::kClosed};
constexpr ServerState kAllServerStates[] = {
    ServerState::kConnecting, ServerState::kLogin,     ServerState::kIdle,
    ServerState::kActive,     ServerState::kTesting,   ServerState::kCanceling,
    ServerState::kDraining,   ServerState::kListening, ServerState::kClosed};

TEST(ClientStateMachine, ClientLifecyclesThePoolRunsAreLegal) {
  const std::vector<std::vector<ClientState>> paths = {
      // md5/SCRAM against auth_file, then transactions.
      {ClientState::kStartup, ClientState::kAuth, ClientState::kWelcome, ClientState::kIdle,
       ClientState::kWaiting, ClientState::kActive, ClientState::kIdle, ClientState::kActive,
       ClientState::kIdle, ClientState::kClosed},
      // auth_query, then the password exchange with the secret it found.
      {ClientState::kStartup, ClientState::kAuthQuery, ClientState::kAuth, ClientState::kIdle},
      // trust straight into a pool whose server parameters are known, and onto the console.
      {ClientState::kStartup, ClientState::kIdle},
      {ClientState::kStartup, ClientState::kAdmin, ClientState::kClosed},
      {ClientState::kStartup, ClientState::kAuth, ClientState::kAdmin},
      // Its queued query is cancelled and nothing else is queued: it leaves the queue.
      {ClientState::kIdle, ClientState::kWaiting, ClientState::kIdle},
  };
  for (const auto& path : paths) {
    for (size_t i = 1; i < path.size(); ++i) {
      EXPECT_TRUE(IsLegalClientMove(path[i - 1], path[i]))
          << ClientStateName(path[i - 1]) << " -> " << ClientStateName(path[i]);
    }
  }
}

TEST(ClientStateMachine, ImpossibleMovesAreRejected) {
  const std::vector<std::pair<ClientState, ClientState>> impossible = {
      {ClientState::kIdle, ClientState::kAuth},       // a logged-in client never logs in again
      {ClientState::kAdmin, ClientState::kIdle},      // the console never hands out servers
      {ClientState::kWelcome, ClientState::kActive},  // not before the welcome is sent
      {ClientState::kActive, ClientState::kWaiting},
      {ClientState::kStartup, ClientState::kActive},
      {ClientState::kAuthQuery, ClientState::kIdle},
      {ClientState::kAuth, ClientState::kAuthQuery},  // the secret is looked up before asking
  };
  for (auto [from, to] : impossible) {
    EXPECT_FALSE(IsLegalClientMove(from, to))
        << ClientStateName(from) << " -> " << ClientStateName(to);
  }
  // Every live state may close; nothing leaves kClosed, and no state moves to itself.
  for (ClientState state : kAllClientStates) {
    EXPECT_EQ(IsLegalClientMove(state, ClientState::kClosed), state != ClientState::kClosed);
    EXPECT_FALSE(IsLegalClientMove(state, state)) << ClientStateName(state);
    for (ClientState to : kAllClientStates) {
      EXPECT_FALSE(IsLegalClientMove(ClientState::kClosed, to));
    }
  }
}

TEST(ServerStateMachine, TheServerLifecycleIsLegalAndShortcutsAreNot) {
  const std::vector<ServerState> life = {
      ServerState::kConnecting, ServerState::kLogin, ServerState::kIdle, ServerState::kTesting,
      ServerState::kIdle, ServerState::kActive, ServerState::kCanceling, ServerState::kIdle,
      ServerState::kActive, ServerState::kTesting, ServerState::kIdle, ServerState::kActive,
      ServerState::kIdle, ServerState::kActive,
      // Its client left mid-query: drained, then reset or returned to the pool.
      ServerState::kDraining, ServerState::kIdle, ServerState::kActive, ServerState::kDraining,
      ServerState::kTesting, ServerState::kIdle,
      // The LISTEN hub holds it while clients listen, then it serves again.
      ServerState::kListening, ServerState::kIdle, ServerState::kListening, ServerState::kClosed};
  for (size_t i = 1; i < life.size(); ++i) {
    EXPECT_TRUE(IsLegalServerMove(life[i - 1], life[i]))
        << ServerStateName(life[i - 1]) << " -> " << ServerStateName(life[i]);
  }
  // A server is never linked before it logged in or while a cancel may still land on it.
  EXPECT_FALSE(IsLegalServerMove(ServerState::kLogin, ServerState::kActive));
  EXPECT_FALSE(IsLegalServerMove(ServerState::kConnecting, ServerState::kIdle));
  EXPECT_FALSE(IsLegalServerMove(ServerState::kCanceling, ServerState::kActive));
  EXPECT_FALSE(IsLegalServerMove(ServerState::kTesting, ServerState::kActive));
  // A draining server is linked only once it is back in the pool.
  EXPECT_FALSE(IsLegalServerMove(ServerState::kDraining, ServerState::kActive));
  EXPECT_FALSE(IsLegalServerMove(ServerState::kIdle, ServerState::kDraining));
  // The hub's server is never linked to a client while it listens.
  EXPECT_FALSE(IsLegalServerMove(ServerState::kListening, ServerState::kActive));
  EXPECT_FALSE(IsLegalServerMove(ServerState::kActive, ServerState::kListening));
  for (ServerState state : kAllServerStates) {
    EXPECT_FALSE(IsLegalServerMove(state, state)) << ServerStateName(state);
    EXPECT_FALSE(IsLegalServerMove(ServerState::kClosed, state));
  }
}

TEST(StateLists, MovesKeepEachConnectionOnExactlyTheListOfItsState) {
  FakeLists worker{ClientState::kStartup, ClientState::kAuth, ClientState::kAdmin};
  FakeLists pool{ClientState::kWelcome, ClientState::kIdle, ClientState::kWaiting,
                 ClientState::kActive};
  FakeConn a(ClientState::kStartup), b(ClientState::kStartup);
  worker.Add(&a);
  worker.Add(&b);
  EXPECT_EQ(worker.size(ClientState::kStartup), 2u);

  worker.Move(&a, ClientState::kAuth);
  pool.Move(&a, ClientState::kIdle);  // from the worker's list into the pool's
  EXPECT_EQ(a.state(), ClientState::kIdle);
  EXPECT_EQ(worker.total(), 1u);
  EXPECT_EQ(pool.size(ClientState::kIdle), 1u);
  EXPECT_EQ(pool[ClientState::kIdle].front(), &a);

  pool.Move(&a, ClientState::kWaiting);
  pool.Move(&a, ClientState::kActive);
  EXPECT_EQ(pool.size(ClientState::kIdle), 0u);
  EXPECT_EQ(pool.size(ClientState::kActive), 1u);

  worker.Move(&b, ClientState::kAdmin);
  worker.Move(&b, ClientState::kClosed);
  pool.Move(&a, ClientState::kClosed);
  EXPECT_EQ(worker.total(), 0u);
  EXPECT_EQ(pool.total(), 0u);
  EXPECT_EQ(a.owner_list, nullptr);
  EXPECT_EQ(b.state(), ClientState::kClosed);
}

TEST(StateLists, IdleServersCanBeKeptMostRecentlyUsedFirst) {
  struct FakeServer : base::ListNode {
    ServerState state() const { return state_; }
    void set_state(ServerState state) { state_ = state; }
    ServerState state_ = ServerState::kLogin;
  };
  StateLists<FakeServer, ServerState, kServerStateCount> servers{ServerState::kLogin,
                                                                 ServerState::kIdle};
  FakeServer first, second;
  servers.Add(&first);
  servers.Add(&second);
  servers.Move(&first, ServerState::kIdle, /*front=*/true);
  servers.Move(&second, ServerState::kIdle, /*front=*/true);
  EXPECT_EQ(servers[ServerState::kIdle].front(), &second);
  EXPECT_EQ(servers[ServerState::kIdle].back(), &first);
}

#ifndef NDEBUG
// PGFLEET_BUG aborts debug and sanitizer builds; release builds count it (base::g_bug_count).
TEST(StateListsDeathTest, AnImpossibleMoveIsABug) {
  FakeLists pool{ClientState::kWelcome, ClientState::kIdle, ClientState::kWaiting,
                 ClientState::kActive};
  FakeConn conn(ClientState::kIdle);
  pool.Add(&conn);
  EXPECT_DEATH(pool.Move(&conn, ClientState::kAuth), "CHECK failed");
}

TEST(StateListsDeathTest, AMoveIntoAStateTheOwnerDoesNotHoldIsABug) {
  FakeLists worker{ClientState::kStartup, ClientState::kAuth};
  FakeConn conn(ClientState::kStartup);
  worker.Add(&conn);
  // Legal as a move, but pooled states belong to a pool's lists.
  EXPECT_DEATH(worker.Move(&conn, ClientState::kIdle), "CHECK failed");
}
#else
TEST(StateLists, AnImpossibleMoveIsCountedInReleaseBuilds) {
  FakeLists pool{ClientState::kIdle, ClientState::kWaiting, ClientState::kActive};
  FakeConn conn(ClientState::kActive);
  pool.Add(&conn);
  const auto before = base::g_bug_count;
  pool.Move(&conn, ClientState::kWaiting);  // held, but never from kActive
  EXPECT_EQ(base::g_bug_count, before + 1);
  // The connection is not lost: it is on the list of the state it was moved to.
  EXPECT_EQ(pool[ClientState::kWaiting].front(), &conn);
}
#endif

}  // namespace
}  // namespace pgfleet::pool
