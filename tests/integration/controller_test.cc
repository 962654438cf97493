// pgfleet-controller with "pods" (pgfleet processes on 127.0.0.2, .3, .4, .5) in front of one
// PostgreSQL: the fleet never holds more than max_db_connections, the busy pod gets most of it,
// pods join and leave, the controller restarts or freezes, cancels cross pods over TCP, and the
// peering port refuses calls without the token.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "pgfleet/controller/v1/controller.grpc.pb.h"
#include "pgfleet/peering/v1/peering.grpc.pb.h"
#include "tests/integration/harness/controller_process.h"
#include "tests/integration/harness/fixtures.h"
#include "tests/integration/harness/fleet_fixture.h"

namespace pgfleet::testing {
namespace {

namespace ctlv1 = ::pgfleet::controller::v1;
namespace peerv1 = ::pgfleet::peering::v1;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr int kBudget = kFleetBudget;
constexpr char kToken[] = "controller-test-token-6f1d2e";

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// The controller's gauges are refreshed a few times a second: waits up to 3 s for `series` to
// read `want`, and returns what it read last.
double WaitForSample(const ControllerProcess& controller, const std::string& series, double want) {
  return WaitFor([&] { return controller.Sample(series); },
                 [&](double value) { return value == want; }, std::chrono::seconds(3));
}

class ControllerTest : public ControllerFixture {};

TEST_F(ControllerTest, BusyPodGetsMostOfTheBudgetAndTheFleetNeverExceedsIt) {
  auto controller = StartController();
  auto a = StartPod("A", "127.0.0.2", *controller);
  auto b = StartPod("B", "127.0.0.3", *controller);
  auto c = StartPod("C", "127.0.0.4", *controller);
  BudgetSampler sampler;
  {
    // 100 clients, 90 of them on pod A.
    Load load_a(*a, 90), load_b(*b, 5), load_c(*c, 5);
    SleepMs(5000);
    sampler.Mark();
    SleepMs(2000);
    auto window = sampler.Window();
    load_a.Stop();
    load_b.Stop();
    load_c.Stop();
    EXPECT_EQ(load_a.errors() + load_b.errors() + load_c.errors(), 0)
        << load_a.first_error() << load_b.first_error() << load_c.first_error();
    EXPECT_GT(load_b.ok(), 0);
    EXPECT_GT(load_c.ok(), 0);
    // A static split would give each pod 4.
    EXPECT_GE(window["ctlpodA"].second, 7.5) << sampler.Describe();
    EXPECT_GT(window["ctlpodA"].second, window["ctlpodB"].second + window["ctlpodC"].second);
  }
  sampler.Stop();
  EXPECT_GT(sampler.samples(), 100);
  EXPECT_LE(sampler.max_total(), kBudget) << sampler.Describe() << "\n" << controller->Log();
  EXPECT_EQ(WaitForSample(*controller, "pgfleet_controller_budget{database=\"postgres\"}", kBudget),
            kBudget);
  // Each pod is its worker and its budget lease.
  EXPECT_EQ(WaitForSample(*controller, "pgfleet_controller_members{state=\"live\"}", 6), 6);
  EXPECT_LE(controller->Sample("pgfleet_controller_committed_connections{database=\"postgres\"}"),
            kBudget);
}

TEST_F(ControllerTest, PodsJoiningAndLeavingUnderLoadKeepTheFleetUnderBudget) {
  auto controller = StartController();
  auto a = StartPod("A", "127.0.0.2", *controller);
  auto b = StartPod("B", "127.0.0.3", *controller);
  auto c = StartPod("C", "127.0.0.4", *controller);
  BudgetSampler sampler;
  Load load_a(*a, 30), load_b(*b, 30), load_c(*c, 30);
  SleepMs(2500);
  auto d = StartPod("D", "127.0.0.5", *controller);
  Load load_d(*d, 20);
  SleepMs(2500);
  sampler.Mark();
  b->Stop(10);  // SIGTERM: drains (shutdown_timeout 2s), leaves the controller, exits
  SleepMs(2500);
  auto window = sampler.Window();
  load_a.Stop();
  load_b.Stop();
  load_c.Stop();
  load_d.Stop();
  sampler.Stop();
  EXPECT_LE(sampler.max_total(), kBudget) << sampler.Describe() << "\n" << controller->Log();
  // Only the removed pod's clients may see errors.
  EXPECT_EQ(load_a.errors(), 0) << load_a.first_error();
  EXPECT_EQ(load_c.errors(), 0) << load_c.first_error();
  EXPECT_EQ(load_d.errors(), 0) << load_d.first_error();
  EXPECT_GT(load_d.ok(), 0);
  EXPECT_GT(window["ctlpodD"].first, 1) << sampler.Describe();
  EXPECT_THAT(controller->Log(), HasSubstr("event=member_left"));
}

TEST_F(ControllerTest, ControllerKilledAndRestartedUnderLoadKeepsTheFleetUnderBudget) {
  auto controller = StartController();
  auto a = StartPod("A", "127.0.0.2", *controller);
  auto b = StartPod("B", "127.0.0.3", *controller);
  auto c = StartPod("C", "127.0.0.4", *controller);
  BudgetSampler sampler;
  Load load_a(*a, 40), load_b(*b, 20), load_c(*c, 20);
  SleepMs(2500);
  controller->Kill();
  SleepMs(500);
  const int ok_before = load_a.ok() + load_b.ok() + load_c.ok();
  controller->Start();
  SleepMs(4000);
  sampler.Mark();
  SleepMs(1000);
  auto window = sampler.Window();
  load_a.Stop();
  load_b.Stop();
  load_c.Stop();
  sampler.Stop();
  EXPECT_LE(sampler.max_total(), kBudget) << sampler.Describe() << "\n" << controller->Log();
  EXPECT_EQ(load_a.errors() + load_b.errors() + load_c.errors(), 0)
      << load_a.first_error() << load_b.first_error() << load_c.first_error();
  EXPECT_GT(load_a.ok() + load_b.ok() + load_c.ok(), ok_before);
  const std::string log = controller->Log();
  // After the restart every worker kept the peer id it mints cancel keys with.
  EXPECT_THAT(log, HasSubstr("peer_id=257 block=1 reclaimed=true"));
  EXPECT_THAT(log, HasSubstr("peer_id=513 block=2 reclaimed=true"));
  EXPECT_THAT(log, HasSubstr("peer_id=769 block=3 reclaimed=true"));
  EXPECT_THAT(log, HasSubstr("event=recovery_done"));
  // Each pod is its worker and its budget lease.
  EXPECT_EQ(WaitForSample(*controller, "pgfleet_controller_members{state=\"live\"}", 6), 6);
  // Shares follow demand again after the restart.
  EXPECT_GE(window["ctlpodA"].first, 5) << sampler.Describe();
}

TEST_F(ControllerTest, PodsCutOffFromTheControllerKeepServingThenShrinkToTheirFloors) {
  auto controller = StartController();
  auto a = StartPod("A", "127.0.0.2", *controller);
  auto b = StartPod("B", "127.0.0.3", *controller);
  auto c = StartPod("C", "127.0.0.4", *controller);
  BudgetSampler sampler;
  Load load_a(*a, 40), load_b(*b, 10), load_c(*c, 10);
  // The busy pod's share once the shares hold still: a window of 10 samples (half a second) in
  // which pod A's servers never moved, at 5 or more. (Taken while the shares still moved, a
  // peak of 9 was compared with the settled 7.)
  int a_before = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        sampler.Mark();
        if (!WaitFor([&] { return sampler.window_samples() >= 10; }, std::chrono::seconds(5))) {
          return false;
        }
        const auto [most, mean] = sampler.Window()["ctlpodA"];
        a_before = most;
        return most >= 5 && mean >= most - 1e-9;
      },
      std::chrono::seconds(20)))
      << sampler.Describe();

  controller->Signal(SIGSTOP);
  const auto stopped_at = Clock::now();
  // Within 3/4 of the lease (1.125 s) every pod keeps its cap and keeps serving.
  const int ok_at_stop = load_a.ok();
  sampler.Mark();
  SleepMs(800);
  EXPECT_GE(sampler.Window()["ctlpodA"].first, a_before - 1) << sampler.Describe();
  EXPECT_GT(load_a.ok(), ok_at_stop);
  // After the lease timeout each pod holds at most its floor (1), and still serves.
  std::this_thread::sleep_until(stopped_at + std::chrono::milliseconds(2200));
  sampler.Mark();
  const int ok_at_floor = load_a.ok() + load_b.ok() + load_c.ok();
  SleepMs(1000);
  auto floors = sampler.Window();
  EXPECT_LE(floors["ctlpodA"].first, 1) << sampler.Describe();
  EXPECT_LE(floors["ctlpodB"].first, 1);
  EXPECT_LE(floors["ctlpodC"].first, 1);
  EXPECT_GT(load_a.ok() + load_b.ok() + load_c.ok(), ok_at_floor);

  // The controller comes back: the pods rejoin and the busy one grows again.
  // A raise granted on the rejoined stream before its first renewal was dropped once, leaving
  // the pod at its floor for good.
  controller->Signal(SIGCONT);
  sampler.Mark();
  EXPECT_TRUE(
      WaitFor([&] { return sampler.Window()["ctlpodA"].first >= 4; }, std::chrono::seconds(10)))
      << sampler.Describe() << "\n"
      << controller->Log() << "\n"
      << a->Log();
  load_a.Stop();
  load_b.Stop();
  load_c.Stop();
  sampler.Stop();
  EXPECT_LE(sampler.max_total(), kBudget) << sampler.Describe();
  EXPECT_EQ(load_a.errors() + load_b.errors() + load_c.errors(), 0)
      << load_a.first_error() << load_b.first_error() << load_c.first_error();
  EXPECT_THAT(a->Log(), HasSubstr("event=controller_lease_lost"));
}

// A pod of several workers is one member of the budget: its lease takes one share per database
// and its workers divide it through the pod's counts, handing idle servers to each other, while
// the fleet stays under the budget.
TEST_F(ControllerTest, PodsOfSeveralWorkersLeaseOneShareAndStayUnderBudgetWhileServersMove) {
  auto controller = StartController();
  auto a = StartPod("A", "127.0.0.2", *controller, /*workers=*/3);
  auto b = StartPod("B", "127.0.0.3", *controller, /*workers=*/3);
  BudgetSampler sampler;
  {
    Load load_a(*a, 45), load_b(*b, 4);
    SleepMs(4000);
    sampler.Mark();
    SleepMs(2000);
    auto window = sampler.Window();
    // Servers moved between A's workers: the pod's share was its limit, its clients on three.
    EXPECT_TRUE(WaitFor([&] { return MetricSum(*a, "pgfleet_server_handoffs_total") > 0; },
                        std::chrono::seconds(5)));
    load_a.Stop();
    load_b.Stop();
    EXPECT_EQ(load_a.errors() + load_b.errors(), 0) << load_a.first_error() << load_b.first_error();
    EXPECT_GT(load_b.ok(), 0);
    // A per-worker lease would hold back a floor for each of B's three workers; as one member
    // per pod, the busy pod gets most of the budget.
    EXPECT_GE(window["ctlpodA"].second, 7.5) << sampler.Describe();
  }
  sampler.Stop();
  EXPECT_GT(sampler.samples(), 50);
  EXPECT_LE(sampler.max_total(), kBudget) << sampler.Describe() << "\n" << controller->Log();
  // Two pods: six workers and two leases.
  EXPECT_EQ(WaitForSample(*controller, "pgfleet_controller_members{state=\"live\"}", 8), 8);
  EXPECT_EQ(WaitForSample(*controller, "pgfleet_controller_pods", 2), 2);
  EXPECT_LE(controller->Sample("pgfleet_controller_committed_connections{database=\"postgres\"}"),
            kBudget);
}

// LISTEN hubs hold a server each while clients listen, and never release it: when the pod's
// share shrinks below them (busy pods join), the hubs' servers are shed like idle ones and the
// fleet stays under the budget; the listeners still get notifications afterwards.
TEST_F(ControllerTest, ListenHubServersAreShedWhenThePodsShareShrinks) {
  auto controller = StartController();
  auto a = StartPod("A", "127.0.0.2", *controller, /*workers=*/4);
  std::vector<ConnPtr> listeners;
  for (int i = 0; i < 12; ++i) {
    listeners.push_back(Connect(a->ConnString()));
    ResultPtr r = Exec(listeners.back(), "LISTEN fleet_jobs");
    ASSERT_EQ(PQresultStatus(r.get()), PGRES_COMMAND_OK) << ErrorOf(listeners.back());
  }
  BudgetSampler sampler;
  {
    auto b = StartPod("B", "127.0.0.3", *controller);
    auto c = StartPod("C", "127.0.0.4", *controller);
    Load load_b(*b, 30), load_c(*c, 30);
    // A's hubs give servers back to its shrunken share (before, they held them whatever the
    // share): wait for it under the load, bounded.
    EXPECT_TRUE(
        WaitFor([&] { return a->Log().find("listen_hub_server_lost") != std::string::npos; },
                std::chrono::seconds(15)));
    // ... and keep the load on while the sampler watches the fleet for a while after it.
    EXPECT_TRUE(WaitFor([&] { return sampler.samples() > 30; }, std::chrono::seconds(15)));
    load_b.Stop();
    load_c.Stop();
    EXPECT_EQ(load_b.errors() + load_c.errors(), 0) << load_b.first_error() << load_c.first_error();
  }
  sampler.Stop();
  EXPECT_GT(sampler.samples(), 30);
  EXPECT_LE(sampler.max_total(), kBudget) << sampler.Describe() << "\n" << controller->Log();
  // The hubs listen again once there is room: a NOTIFY reaches every listener.
  ConnPtr notifier = Connect(a->ConnString());
  for (size_t i = 0; i < listeners.size(); ++i) {
    bool got = false;
    EXPECT_TRUE(WaitFor(
        [&] {
          if (!got) {
            ResultPtr n = Exec(notifier, "NOTIFY fleet_jobs");
            (void)n;
          }
          PQconsumeInput(listeners[i].get());
          while (PGnotify* note = PQnotifies(listeners[i].get())) {
            got = true;
            PQfreemem(note);
          }
          return got;
        },
        std::chrono::seconds(10)))
        << "listener " << i;
  }
}

// The pod's lease process dies: the supervisor starts another, which rejoins with what the pod
// holds; the workers keep serving within the share all along.
TEST_F(ControllerTest, ThePodsLeaseProcessRestartsAndTheWorkersKeepTheirShare) {
  auto controller = StartController();
  auto a = StartPod("A", "127.0.0.2", *controller, /*workers=*/2);
  auto b = StartPod("B", "127.0.0.3", *controller);
  BudgetSampler sampler;
  Load load_a(*a, 30), load_b(*b, 4);
  SleepMs(3000);
  const pid_t lease = PodLeasePid(a->pid());
  ASSERT_GT(lease, 0);
  sampler.Mark();
  ASSERT_EQ(kill(lease, SIGKILL), 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        const pid_t now = PodLeasePid(a->pid());
        return now > 0 && now != lease;
      },
      std::chrono::seconds(5)))
      << a->Log();
  EXPECT_TRUE(
      WaitFor([&] { return a->Log().find("event=pod_lease_restored") != std::string::npos; },
              std::chrono::seconds(5)));
  const int ok_after_restart = load_a.ok();
  SleepMs(2000);
  auto window = sampler.Window();
  EXPECT_GT(load_a.ok(), ok_after_restart);
  load_a.Stop();
  load_b.Stop();
  sampler.Stop();
  EXPECT_EQ(load_a.errors() + load_b.errors(), 0) << load_a.first_error() << load_b.first_error();
  // It kept its share through the restart: never down to its floor.
  EXPECT_GE(window["ctlpodA"].second, 5) << sampler.Describe();
  EXPECT_LE(sampler.max_total(), kBudget) << sampler.Describe() << "\n" << controller->Log();
  EXPECT_THAT(a->Log(), HasSubstr("event=pod_lease_died"));
  EXPECT_THAT(controller->Log(), HasSubstr("/pod"));
}

// A pod that joins when the other pods hold the whole budget gets share 0. Its first client
// waits, at login, for the pool's first server (the welcome that tells the pool the startup
// parameters): that wait is demand the controller must see, or the pod gets room only when
// another pod leaves (in Kubernetes, a sidecar's app waited 13 to 43 s for its first query).
TEST_F(ControllerTest, APodWhoseShareIsZeroServesItsFirstClientFromIdlePodsRoom) {
  budget_ = 2;
  auto controller = StartController();
  auto a = StartPod("A", "127.0.0.2", *controller);
  auto b = StartPod("B", "127.0.0.3", *controller);
  auto c = StartPod("C", "127.0.0.4", *controller);
  // Idle A and B hold the budget: one each, and C nothing.
  ASSERT_TRUE(WaitFor(
      [&] {
        return controller->Sample("pgfleet_controller_pods") == 3 &&
               controller->Sample(
                   "pgfleet_controller_committed_connections{database=\"postgres\"}") == 2;
      },
      std::chrono::seconds(10)))
      << controller->Log();
  const auto start = std::chrono::steady_clock::now();
  ConnPtr conn = Connect(c->ConnString());
  ASSERT_TRUE(Ok(conn)) << ErrorOf(conn) << c->Log();
  EXPECT_TRUE(ResultOk(Exec(conn, "SELECT 1"))) << ErrorOf(conn);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // A lease round trip and a lowered share of an idle pod: about a second (the pods' query
  // wait is 60 s, so the old behaviour would wait far longer).
  EXPECT_LT(seconds, 5.0) << c->Log() << controller->Log();
}

// A session opened with the wire protocol, to learn its BackendKeyData (libpq keeps the secret
// to itself) and send a query without waiting for it.
class RawSession {
 public:
  ~RawSession() {
    if (fd_ >= 0) close(fd_);
  }
  bool Open(const std::string& address, int port) {
    fd_ = Dial(address, port);
    if (fd_ < 0) return false;
    std::string startup;
    const std::string params = std::string("user\0postgres\0database\0postgres\0\0", 33);
    AppendInt(&startup, static_cast<int>(8 + params.size()));
    AppendInt(&startup, 196608);
    startup += params;
    if (!WriteAll(startup)) return false;
    while (true) {
      char type;
      std::string body;
      if (!ReadMessage(&type, &body)) return false;
      if (type == 'K' && body.size() >= 8) {
        pid_ = ReadInt(body, 0);
        secret_ = ReadInt(body, 4);
      }
      if (type == 'E') return false;
      if (type == 'Z') return true;
    }
  }
  bool SendQuery(const std::string& sql) {
    std::string msg = "Q";
    AppendInt(&msg, static_cast<int>(4 + sql.size() + 1));
    msg += sql;
    msg.push_back('\0');
    return WriteAll(msg);
  }
  // Sends this session's CancelRequest to address:port (any pod).
  bool CancelVia(const std::string& address, int port) const {
    int fd = Dial(address, port);
    if (fd < 0) return false;
    std::string msg;
    AppendInt(&msg, 16);
    AppendInt(&msg, 80877102);
    AppendInt(&msg, pid_);
    AppendInt(&msg, secret_);
    const bool ok = write(fd, msg.data(), msg.size()) == static_cast<ssize_t>(msg.size());
    char byte;
    (void)read(fd, &byte, 1);  // the pooler closes without answering
    close(fd);
    return ok;
  }
  // After a query: the SQLSTATE of its ErrorResponse, "" while nothing arrived (non-blocking).
  std::string PollSqlState() {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return "";
    char type;
    std::string body;
    while (ReadMessage(&type, &body)) {
      if (type == 'E') {
        for (size_t i = 0; i < body.size() && body[i] != '\0';) {
          const char field = body[i];
          const size_t end = body.find('\0', i + 1);
          if (field == 'C') return body.substr(i + 1, end - i - 1);
          i = end + 1;
        }
        return "?";
      }
      if (type == 'Z') return "none";
    }
    return "closed";
  }
  int fd() const { return fd_; }

 private:
  static int Dial(const std::string& address, int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }
  static void AppendInt(std::string* out, int v) {
    const uint32_t n = htonl(static_cast<uint32_t>(v));
    out->append(reinterpret_cast<const char*>(&n), 4);
  }
  static int ReadInt(const std::string& s, size_t at) {
    uint32_t n;
    memcpy(&n, s.data() + at, 4);
    return static_cast<int>(ntohl(n));
  }
  bool WriteAll(const std::string& data) {
    return write(fd_, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  }
  bool ReadExactly(char* out, size_t n) {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = read(fd_, out + got, n - got);
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }
  bool ReadMessage(char* type, std::string* body) {
    char header[5];
    if (!ReadExactly(header, 5)) return false;
    *type = header[0];
    const int len = ReadInt(std::string(header + 1, 4), 0);
    body->resize(static_cast<size_t>(len - 4));
    return ReadExactly(body->data(), body->size());
  }

  int fd_ = -1;
  int pid_ = 0;
  int secret_ = 0;
};

// Opens `n` sessions on pod `a` running pg_sleep(30), sends each one's CancelRequest to pod `b`,
// and returns how many stopped (57014) within 1 s of their cancel.
int CancelAcrossPods(PgServer& pg, const PgfleetProcess& a, const PgfleetProcess& b, int n) {
  std::vector<std::unique_ptr<RawSession>> sessions;
  for (int i = 0; i < n; ++i) {
    sessions.push_back(std::make_unique<RawSession>());
    EXPECT_TRUE(sessions.back()->Open(a.address(), a.port())) << a.Log().substr(0, 3000);
    EXPECT_TRUE(sessions.back()->SendQuery("SELECT pg_sleep(30)"));
  }
  WaitFor([&] {
    return pg.QueryValue(
               "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
               "query = 'SELECT pg_sleep(30)'") == std::to_string(n);
  });
  std::vector<Clock::time_point> sent(n);
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(sessions[i]->CancelVia(b.address(), b.port()));
    sent[i] = Clock::now();
  }
  int stopped = 0;
  std::vector<bool> done(n, false);
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  while (Clock::now() < deadline && stopped < n) {
    for (int i = 0; i < n; ++i) {
      if (done[i]) continue;
      const std::string state = sessions[i]->PollSqlState();
      if (state.empty()) continue;
      done[i] = true;
      if (state == "57014" && Clock::now() - sent[i] < std::chrono::seconds(1)) ++stopped;
    }
    SleepMs(10);
  }
  pg.Exec(
      "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query = "
      "'SELECT pg_sleep(30)' AND pid <> pg_backend_pid()");
  return stopped;
}

TEST_F(ControllerTest, CancelsSentToPodBStopSessionsOnPodAWithinASecond) {
  auto controller = StartController(/*budget=*/false);
  auto a = StartPod("A", "127.0.0.2", *controller, /*workers=*/2, /*budget=*/false, 240);
  auto b = StartPod("B", "127.0.0.3", *controller, /*workers=*/2, /*budget=*/false, 240);
  EXPECT_EQ(CancelAcrossPods(pg(), *a, *b, 100), 100) << b->Log().substr(0, 4000);
  // The keys named pod A's block, so pod B sent them to pod A's peering port.
  EXPECT_THAT(b->Log(), ::testing::Not(HasSubstr("cancel_forward_failed")));
}

TEST_F(ControllerTest, WithMutualTlsCancelsCrossPodsAndPlaintextPeersAreRefused) {
  UseTls();
  auto controller = StartController(/*budget=*/false);
  auto a = StartPod("A", "127.0.0.2", *controller, /*workers=*/2, /*budget=*/false, 240);
  auto b = StartPod("B", "127.0.0.3", *controller, /*workers=*/2, /*budget=*/false, 240);
  // Both pods got their ids from the controller over TLS, then forward over TLS.
  EXPECT_THAT(a->Log(), HasSubstr("event=controller_joined"));
  EXPECT_EQ(CancelAcrossPods(pg(), *a, *b, 20), 20) << b->Log().substr(0, 4000);

  const std::string target = absl::StrCat("127.0.0.2:", peering_ports_["A"]);
  auto forward = [&](std::shared_ptr<grpc::ChannelCredentials> creds) {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("pgfleet");
    auto stub = peerv1::Peering::NewStub(grpc::CreateCustomChannel(target, creds, args));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    peerv1::ForwardCancelRequest request;
    request.mutable_key()->set_pid(12345);
    request.mutable_key()->set_secret(std::string(4, 'x'));
    peerv1::ForwardCancelReply reply;
    return stub->ForwardCancel(&context, request, &reply).error_code();
  };
  EXPECT_NE(forward(grpc::InsecureChannelCredentials()), grpc::StatusCode::OK);
  // The CA alone is not enough: peers must present a certificate it signed.
  grpc::SslCredentialsOptions no_client_cert;
  no_client_cert.pem_root_certs = RunCommandOutput("cat " + dir_ + "/ca.crt");
  EXPECT_NE(forward(grpc::SslCredentials(no_client_cert)), grpc::StatusCode::OK);
  grpc::SslCredentialsOptions with_cert = no_client_cert;
  with_cert.pem_private_key = RunCommandOutput("cat " + dir_ + "/tls.key");
  with_cert.pem_cert_chain = RunCommandOutput("cat " + dir_ + "/tls.crt");
  EXPECT_EQ(forward(grpc::SslCredentials(with_cert)), grpc::StatusCode::OK);
}

TEST_F(ControllerTest, WithoutAControllerStaticPeersStillFindTheOwner) {
  // Without a controller every pod's keys carry block 0 and name no pod: a pod that does not
  // find a key offers it, once, to every pod in peering.static_peers.
  auto pods =
      StaticPeerPods(2, "pool_mode: transaction, default_pool_size: 120, cancel_rate_limit: 1000");
  // References, not structured bindings: lambdas below capture them (clang 14).
  auto& a = pods.first;
  auto& b = pods.second;
  // The workers bind the peering ports after the client port, then report ready.
  WaitFor([&] { return WorkersReady(*a) >= 2 && WorkersReady(*b) >= 2; });
  EXPECT_EQ(CancelAcrossPods(pg(), *a, *b, 20), 20) << b->Log().substr(0, 4000);
}

TEST_F(ControllerTest, DdlThroughOnePodMakesTheOtherPodsNextParseFresh) {
  // Prepared statements are shared by their text within a schema epoch; DDL that pod A sees
  // starts a new epoch there and, over peering, in pod B, whose server still holds the statement
  // from before the DDL.
  ASSERT_EQ(Value(Connect(pg().ConnString()),
                  "DROP TABLE IF EXISTS sc_pods; CREATE TABLE sc_pods (a int, b int, c int); "
                  "SELECT 'ready'"),
            "ready");
  auto pods = StaticPeerPods(
      1, "pool_mode: transaction, default_pool_size: 1, max_prepared_statements: 100");
  // References, not structured bindings: lambdas below capture them (clang 14).
  auto& a = pods.first;
  auto& b = pods.second;
  WaitFor([&] { return WorkersReady(*a) >= 1 && WorkersReady(*b) >= 1; });
  const std::string sql = "SELECT * FROM sc_pods";
  {
    auto before = Connect(b->ConnString());
    ResultPtr prepared(PQprepare(before.get(), "s", sql.c_str(), 0, nullptr));
    ASSERT_EQ(PQresultStatus(prepared.get()), PGRES_COMMAND_OK) << ErrorOf(before);
    ResultPtr described(PQdescribePrepared(before.get(), "s"));
    ASSERT_EQ(PQnfields(described.get()), 3);
  }
  ASSERT_EQ(Value(Connect(a->ConnString()), "ALTER TABLE sc_pods DROP COLUMN b; SELECT 'done'"),
            "done");
  // Bounded: the notice goes out within 20 ms of the DDL.
  ASSERT_TRUE(WaitFor([&] {
    return b->Log().find("event=schema_changed_by_peer") != std::string::npos;
  })) << a->Log().substr(0, 3000);
  // One look: a Parse on B answered from its server's old statement would fail with 0A000 here.
  auto after = Connect(b->ConnString());
  ResultPtr prepared(PQprepare(after.get(), "s", sql.c_str(), 0, nullptr));
  ASSERT_EQ(PQresultStatus(prepared.get()), PGRES_COMMAND_OK) << ErrorOf(after);
  ResultPtr described(PQdescribePrepared(after.get(), "s"));
  ASSERT_EQ(PQresultStatus(described.get()), PGRES_COMMAND_OK) << ErrorOf(after);
  EXPECT_EQ(PQnfields(described.get()), 2);
}

TEST_F(ControllerTest, PeeringAndControllerRefuseCallsWithoutTheToken) {
  auto controller = StartController();
  auto a = StartPod("A", "127.0.0.2", *controller);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.2:", peering_ports_["A"]),
                                     grpc::InsecureChannelCredentials());
  auto stub = peerv1::Peering::NewStub(channel);
  auto forward = [&](const std::string& authorization) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
    peerv1::ForwardCancelRequest request;
    request.mutable_key()->set_pid(12345);
    request.mutable_key()->set_secret(std::string(4, 'x'));
    peerv1::ForwardCancelReply reply;
    return stub->ForwardCancel(&context, request, &reply).error_code();
  };
  EXPECT_EQ(forward(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(forward("Bearer not-the-token"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(forward(absl::StrCat("Bearer ", kToken)), grpc::StatusCode::OK);
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    peerv1::GetWorkerStatsRequest request;
    peerv1::WorkerStats reply;
    EXPECT_EQ(stub->GetWorkerStats(&context, request, &reply).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_THAT(a->Log(), HasSubstr("event=peering_call_refused"));

  // Nobody joins the fleet (and gets a budget share) without the token either.
  auto ctl_stub = ctlv1::Controller::NewStub(
      grpc::CreateChannel(controller->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto stream = ctl_stub->Lease(&context);
  ctlv1::WorkerMessage hello;
  hello.mutable_hello()->set_pod_id("intruder");
  hello.mutable_hello()->set_local_peer_id(1);
  stream->Write(hello);
  ctlv1::ControllerMessage reply;
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(WaitForSample(*controller, "pgfleet_controller_members{state=\"live\"}", 2), 2)
      << controller->Log();
  EXPECT_GE(
      WaitForSample(*controller, "pgfleet_controller_events_total{event=\"refused_calls\"}", 1), 1);
}

}  // namespace
}  // namespace pgfleet::testing
