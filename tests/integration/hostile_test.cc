// Hostile clients: malformed, truncated and oversized packets, half-open connections, logins that
// never finish, cancel floods, too many concurrent logins, and hba access rules. Each bad client
// must be answered with a FATAL and closed alone while well-behaved clients (pgbench) see nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {
namespace hostile_test {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// --- wire bytes libpq would never send ---

std::string Int32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string StartupPacket(const std::vector<std::pair<std::string, std::string>>& params,
                          uint32_t version = 196608, bool terminator = true) {
  std::string body = Int32(version);
  for (const auto& [k, v] : params)
    absl::StrAppend(&body, k, std::string(1, '\0'), v, std::string(1, '\0'));
  if (terminator) body.push_back('\0');
  return Int32(static_cast<uint32_t>(body.size() + 4)) + body;
}

std::string Message(char type, const std::string& body) {
  return std::string(1, type) + Int32(static_cast<uint32_t>(body.size() + 4)) + body;
}

struct ErrorInfo {
  std::string severity;
  std::string code;
  std::string message;
};

// The first ErrorResponse in a stream of backend messages (empty fields when there is none).
ErrorInfo FirstError(const std::string& bytes) {
  size_t pos = 0;
  while (pos + 5 <= bytes.size()) {
    const char type = bytes[pos];
    const uint32_t len = (static_cast<uint8_t>(bytes[pos + 1]) << 24) |
                         (static_cast<uint8_t>(bytes[pos + 2]) << 16) |
                         (static_cast<uint8_t>(bytes[pos + 3]) << 8) |
                         static_cast<uint8_t>(bytes[pos + 4]);
    if (len < 4 || pos + 1 + len > bytes.size()) break;
    if (type == 'E') {
      ErrorInfo info;
      for (absl::string_view field :
           absl::StrSplit(absl::string_view(bytes.data() + pos + 5, len - 4), '\0')) {
        if (field.empty()) continue;
        const std::string value(field.substr(1));
        if (field[0] == 'S') info.severity = value;
        if (field[0] == 'C') info.code = value;
        if (field[0] == 'M') info.message = value;
      }
      return info;
    }
    pos += 1 + len;
  }
  return {};
}

// True when `bytes` holds a complete backend message of `type`.
bool HasMessage(const std::string& bytes, char type) {
  size_t pos = 0;
  while (pos + 5 <= bytes.size()) {
    const uint32_t len = (static_cast<uint8_t>(bytes[pos + 1]) << 24) |
                         (static_cast<uint8_t>(bytes[pos + 2]) << 16) |
                         (static_cast<uint8_t>(bytes[pos + 3]) << 8) |
                         static_cast<uint8_t>(bytes[pos + 4]);
    if (len < 4 || pos + 1 + len > bytes.size()) return false;
    if (bytes[pos] == type) return true;
    pos += 1 + len;
  }
  return false;
}

// A plain TCP connection to pgfleet, for bytes libpq would never send.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~RawClient() {
    if (fd_ >= 0) close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return fd_ >= 0; }

  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }

  // Reads until `done(bytes)` holds, the peer closes, or `timeout` passes. `*closed` tells
  // whether the peer closed (EOF or reset).
  std::string ReadUntil(const std::function<bool(const std::string&)>& done, milliseconds timeout,
                        bool* closed = nullptr) {
    const auto deadline = Clock::now() + timeout;
    if (closed != nullptr) *closed = false;
    while (!done(buffer_)) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[16384];
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) {
        if (closed != nullptr) *closed = true;
        break;
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
    return buffer_;
  }
  // Everything until the peer closes (or the timeout).
  std::string ReadUntilClose(milliseconds timeout, bool* closed) {
    return ReadUntil([](const std::string&) { return false; }, timeout, closed);
  }

 private:
  int fd_ = -1;
  std::string buffer_;
};

// Logs in over a raw socket as `user` with trust auth; true when ReadyForQuery arrived.
bool RawTrustLogin(RawClient& client, const std::string& user = "postgres") {
  if (!client.Send(StartupPacket({{"user", user}, {"database", "postgres"}}))) return false;
  std::string got =
      client.ReadUntil([](const std::string& b) { return HasMessage(b, 'Z'); }, milliseconds(5000));
  return HasMessage(got, 'Z') && FirstError(got).code.empty();
}

// pgbench -S through pgfleet in the background; Finish() returns its output with "exit=N".
class Pgbench {
 public:
  Pgbench(const PgfleetProcess& fleet, int clients, int seconds)
      : out_path_(fleet.dir() + "/pgbench.out") {
    const std::string command = absl::StrCat(
        "pgbench -n -S -c ", clients, " -j 4 -T ", seconds, " -h 127.0.0.1 -p ", fleet.port(),
        " -U postgres postgres > ", out_path_, " 2>&1; echo exit=$? >> ", out_path_);
    thread_ = std::thread([command] { RunCommand(command); });
  }
  ~Pgbench() {
    if (thread_.joinable()) thread_.join();
  }
  std::string Finish() {
    if (thread_.joinable()) thread_.join();
    return RunCommandOutput("cat " + out_path_);
  }

 private:
  std::string out_path_;
  std::thread thread_;
};

void ExpectCleanPgbench(const std::string& out) {
  EXPECT_THAT(out, HasSubstr("exit=0")) << out;
  EXPECT_THAT(out, HasSubstr("number of failed transactions: 0 (0.000%)")) << out;
  EXPECT_THAT(out, Not(HasSubstr("error"))) << out;
}

class HostileTest : public IntegrationTest {
 protected:
  // md5user's and scramuser's secrets as PostgreSQL stores them, plus postgres without one.
  std::string Userlist() {
    return absl::StrCat(
        "\"md5user\" \"",
        pg().QueryValue("SELECT rolpassword FROM pg_authid WHERE rolname='md5user'"),
        "\"\n\"scramuser\" \"",
        pg().QueryValue("SELECT rolpassword FROM pg_authid WHERE rolname='scramuser'"),
        "\"\n\"postgres\" \"\"\n");
  }
  // The passwords the tests type and the secrets the userlist holds: none may reach a log.
  void ExpectNoSecretsIn(const std::string& text) {
    const std::string md5 =
        pg().QueryValue("SELECT rolpassword FROM pg_authid WHERE rolname='md5user'");
    for (const std::string& secret : {std::string("md5pass"), std::string("scrampass"),
                                      std::string("SCRAM-SHA-256$"), md5, md5.substr(3)}) {
      EXPECT_THAT(text, Not(HasSubstr(secret))) << "a log line holds a secret";
    }
  }
};

struct BadInput {
  const char* name;
  bool after_login;            // sent by a client that logged in first
  std::string bytes;           // what the client sends
  bool half_close;             // shut the write side after sending
  const char* message;         // part of the FATAL's text (empty = any)
  const char* code = "08P01";  // its SQLSTATE
};

std::vector<BadInput> BadInputs() {
  std::string no_terminator = StartupPacket({{"user", "postgres"}}, 196608, false);
  std::string data_after = StartupPacket({{"user", "postgres"}});
  data_after += "xyz";
  data_after.replace(0, 4, Int32(static_cast<uint32_t>(data_after.size())));
  std::string missing_value = Int32(196608) + std::string("user\0", 5);
  missing_value = Int32(static_cast<uint32_t>(missing_value.size() + 4)) + missing_value;
  const std::string huge_startup = Int32(10001) + Int32(196608) + std::string(200, 'a');
  return {
      {"startup_length_below_8", false, Int32(4) + Int32(0), false, "invalid startup packet"},
      {"startup_length_7", false, Int32(7) + "abc", false, "invalid startup packet"},
      {"startup_over_10000_bytes", false, huge_startup, false, "invalid startup packet"},
      {"startup_length_2gib", false, Int32(0x7fffffff) + Int32(196608), false, ""},
      {"startup_length_negative", false, Int32(0xffffffff) + Int32(196608), false, ""},
      {"startup_without_terminator", false, no_terminator, false, "missing terminator"},
      {"startup_data_after_terminator", false, data_after, false, "data after terminator"},
      {"startup_missing_value", false, missing_value, false, "missing value"},
      {"startup_protocol_2", false, StartupPacket({{"user", "postgres"}}, 0x20000), false,
       "unsupported frontend protocol", "0A000"},  // as PostgreSQL answers
      // Any other parameter names a setting, as PostgreSQL reads it: one that is no setting is
      // refused as PostgreSQL refuses it, one that cannot name one before any server sees it.
      {"startup_unknown_setting", false,
       StartupPacket({{"user", "postgres"}, {"no_such_guc", "1"}}), false,
       "unrecognized configuration parameter \"no_such_guc\"", "42704"},
      {"startup_parameter_no_setting_could_have", false,
       StartupPacket({{"user", "postgres"}, {"no such;guc", "1"}}), false,
       "unsupported startup parameter"},
      {"startup_options_other_switch", false,
       StartupPacket({{"user", "postgres"}, {"options", "-c a.b=1 -B 8"}}), false,
       "unsupported options startup parameter"},
      {"startup_replication", false, StartupPacket({{"user", "postgres"}, {"replication", "true"}}),
       false, "replication connections are not supported", "0A000"},
      {"ssl_request_with_stuffed_bytes", false,
       Int32(8) + Int32(80877103) + StartupPacket({{"user", "postgres"}}), false,
       "unexpected data after encryption request"},
      {"cancel_request_short_key", false, Int32(14) + Int32(80877102) + Int32(1) + "ab", false,
       "invalid cancel request length"},
      {"startup_truncated_then_eof", false, StartupPacket({{"user", "postgres"}}).substr(0, 12),
       true, "incomplete startup packet"},
      {"message_length_below_4", true, std::string("Q") + Int32(3), false,
       "invalid message length"},
      {"message_over_max_packet_size", true, std::string("Q") + Int32(2 << 20) + "SELECT", false,
       "invalid message length"},
      {"message_length_over_2gib", true, std::string("Q") + Int32(0x80000000u), false,
       "invalid message length"},
      {"message_truncated_then_eof", true, std::string("Q") + Int32(100) + "SELECT 1", true,
       "incomplete message"},
      // Each of these would make PostgreSQL end or derail the session without answering the
      // client, so a server released to the next client would carry it: refused by pgfleet.
      {"message_unknown_type", true, Message('z', "junk"), false,
       "invalid frontend message type 122"},
      {"flush_with_a_body", true, Message('H', "junk"), false, "invalid message length"},
      {"copy_done_over_small_limit", true, Message('c', std::string(20000, 'x')), false,
       "invalid message length"},
      {"password_message_after_login", true, Message('p', std::string("pw\0", 3)), false,
       "invalid frontend message type 112"},
  };
}

TEST_F(HostileTest, BadPacketsGetFatalAndCloseOnlyTheirConnectionWhilePgbenchRuns) {
  ASSERT_NO_FATAL_FAILURE(InitPgbench());
  PgfleetProcess fleet(PoolConfig("transaction", 12, "  max_packet_size: 1048576\n"));
  Pgbench bench(fleet, 32, 5);
  // Until pgbench's clients have servers, so bad input lands on a busy worker.
  WaitFor([&] { return ServerConnections() > 0; });
  const auto inputs = BadInputs();
  // Round after round until pgbench is nearly done, so bad input lands on a busy worker.
  const auto until = Clock::now() + std::chrono::seconds(4);
  int rounds = 0;
  while (rounds == 0 || Clock::now() < until) {
    ++rounds;
    for (const BadInput& input : inputs) {
      RawClient client(fleet.port());
      ASSERT_TRUE(client.connected());
      if (input.after_login) {
        ASSERT_TRUE(RawTrustLogin(client)) << input.name;
      }
      ASSERT_TRUE(client.Send(input.bytes)) << input.name;
      if (input.half_close) client.ShutdownWrite();
      bool closed = false;
      const std::string reply = client.ReadUntilClose(milliseconds(5000), &closed);
      const ErrorInfo error = FirstError(reply);
      EXPECT_TRUE(closed) << input.name << ": connection left open";
      EXPECT_EQ(error.severity, "FATAL") << input.name;
      EXPECT_EQ(error.code, input.code) << input.name << ": " << error.message;
      EXPECT_THAT(error.message, HasSubstr(input.message)) << input.name;
    }
  }
  ExpectCleanPgbench(bench.Finish());
  EXPECT_TRUE(fleet.Running()) << fleet.Log();
  auto after = Connect(fleet.ConnString());
  EXPECT_EQ(Value(after, "SELECT 'still serving'"), "still serving");
  EXPECT_GE(rounds, 2);
}

TEST_F(HostileTest, TwoThousandHalfOpenConnectionsDoNotStarvePgbench) {
  ASSERT_NO_FATAL_FAILURE(InitPgbench());
  // 2,000 sockets here plus as many in pgfleet: lift the soft descriptor limit to the hard one
  // (pgfleet inherits it, and raises its own too).
  struct rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  }
  if (limit.rlim_cur < 2300) GTEST_SKIP() << "hard RLIMIT_NOFILE " << limit.rlim_max;
  PgfleetProcess fleet(PoolConfig("transaction", 12));
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 2000; ++i) {
    auto client = std::make_unique<RawClient>(fleet.port());
    ASSERT_TRUE(client->connected()) << i;
    // A third send nothing, a third half a startup packet, a third a whole one then stall.
    if (i % 3 == 1) {
      ASSERT_TRUE(client->Send(Int32(64) + Int32(196608)));
    } else if (i % 3 == 2) {
      ASSERT_TRUE(client->Send(StartupPacket({{"user", "md5user"}, {"database", "postgres"}})));
    }
    idle.push_back(std::move(client));
  }
  const auto start = Clock::now();
  auto probe = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(probe)) << ErrorOf(probe);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  Pgbench bench(fleet, 32, 3);
  ExpectCleanPgbench(bench.Finish());
  EXPECT_THAT(fleet.Log(), Not(HasSubstr("too_many_open_files")));
  EXPECT_EQ(Value(probe, "SELECT 'ok'"), "ok");
}

TEST_F(HostileTest, ClientThatNeverFinishesLoginIsDroppedAtLoginTimeout) {
  PgfleetProcess fleet(absl::StrCat(PoolConfig("transaction", 2, "  client_login_timeout: 500ms\n"),
                                    "auth:\n  type: md5\n  file: userlist.txt\n"),
                       Userlist());
  RawClient silent(fleet.port());
  RawClient partial(fleet.port());
  ASSERT_TRUE(
      partial.Send(StartupPacket({{"user", "md5user"}, {"database", "postgres"}}).substr(0, 10)));
  RawClient no_password(fleet.port());
  ASSERT_TRUE(no_password.Send(StartupPacket({{"user", "md5user"}, {"database", "postgres"}})));
  const auto start = Clock::now();
  for (RawClient* client : {&silent, &partial, &no_password}) {
    bool closed = false;
    const ErrorInfo error = FirstError(client->ReadUntilClose(milliseconds(5000), &closed));
    EXPECT_TRUE(closed);
    EXPECT_EQ(error.severity, "FATAL");
    EXPECT_EQ(error.code, "08P01");
    EXPECT_EQ(error.message, "client_login_timeout");
  }
  const auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, milliseconds(400));
  EXPECT_LT(elapsed, milliseconds(2500));
  // A client that did log in is not subject to the login timeout.
  auto c = Connect(fleet.ConnString("md5user", "postgres", "password=md5pass"));
  ASSERT_TRUE(Ok(c)) << ErrorOf(c);
  std::this_thread::sleep_for(milliseconds(900));
  EXPECT_EQ(Value(c, "SELECT 'alive'"), "alive");
  ExpectNoSecretsIn(fleet.Log());
}

// Sends one CancelRequest with a made-up key from 127.0.0.1 and hangs up without waiting.
void SendBogusCancel(int port, uint32_t n) {
  RawClient client(port);
  (void)client.Send(Int32(16) + Int32(80877102) + Int32(n) + Int32(n * 2654435761u));
}

bool CancelRunning(const ConnPtr& c) {
  PGcancel* cancel = PQgetCancel(c.get());
  char err[256];
  const bool ok = PQcancel(cancel, err, sizeof(err)) == 1;
  PQfreeCancel(cancel);
  return ok;
}

TEST_F(HostileTest, CancelFloodFromOneAddressIsRateLimited) {
  PgfleetProcess fleet(PoolConfig("transaction", 2, "  cancel_rate_limit: 1\n"));
  auto victim = Connect(fleet.ConnString());
  ASSERT_TRUE(Ok(victim)) << ErrorOf(victim);
  // While a flood from this address goes on, a real cancel from it is refused like the rest:
  // the flood takes each token as it refills (one a second).
  ASSERT_EQ(PQsendQuery(victim.get(), "SELECT pg_sleep(1.5)"), 1);
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> sent{0};
  std::thread flood([&] {
    while (!stop) SendBogusCancel(fleet.port(), sent++);
  });
  // Until the flood has emptied the bucket and pgfleet refuses cancels from this address.
  WaitFor([&] { return fleet.Log().find("event=cancel_rate_limited") != std::string::npos; });
  ASSERT_TRUE(CancelRunning(victim));
  ResultPtr slept(PQgetResult(victim.get()));
  stop = true;
  flood.join();
  EXPECT_EQ(PQresultStatus(slept.get()), PGRES_TUPLES_OK) << PQerrorMessage(victim.get());
  while (PGresult* r = PQgetResult(victim.get())) PQclear(r);
  EXPECT_GT(sent.load(), 100u);
  // Once the bucket refills, cancels work again.
  std::this_thread::sleep_for(milliseconds(1100));
  ASSERT_EQ(PQsendQuery(victim.get(), "SELECT pg_sleep(10)"), 1);
  // Until PostgreSQL runs it: a cancel that arrives earlier has no query to stop.
  WaitFor([&] {
    return pg().QueryValue(
               "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND "
               "query = 'SELECT pg_sleep(10)'") != "0";
  });
  const auto start = Clock::now();
  ASSERT_TRUE(CancelRunning(victim));
  ResultPtr canceled(PQgetResult(victim.get()));
  EXPECT_EQ(SqlState(canceled), "57014");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  while (PGresult* r = PQgetResult(victim.get())) PQclear(r);

  // One warning for the whole flood (at most one per 10 s per address), with the count.
  const std::string log = fleet.Log();
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (!absl::StrContains(line, "event=cancel_rate_limited")) continue;
    ++lines;
    EXPECT_THAT(std::string(line), HasSubstr("addr=127.0.0.1 limit_per_s=1 refused="));
  }
  EXPECT_EQ(lines, 1) << log.substr(0, 2000);
}

TEST_F(HostileTest, ConcurrentLoginsOverTheCapAreRefused) {
  PgfleetProcess fleet(absl::StrCat(PoolConfig("transaction", 2, "  max_concurrent_logins: 2\n"),
                                    "auth:\n  type: md5\n  file: userlist.txt\n"),
                       Userlist());
  // Two clients stop at the password prompt and hold both login slots.
  std::vector<std::unique_ptr<RawClient>> stalled;
  for (int i = 0; i < 2; ++i) {
    stalled.push_back(std::make_unique<RawClient>(fleet.port()));
    ASSERT_TRUE(
        stalled.back()->Send(StartupPacket({{"user", "md5user"}, {"database", "postgres"}})));
    const std::string got = stalled.back()->ReadUntil(
        [](const std::string& b) { return HasMessage(b, 'R'); }, milliseconds(5000));
    ASSERT_TRUE(HasMessage(got, 'R'));
  }
  auto refused = Connect(fleet.ConnString("md5user", "postgres", "password=md5pass"));
  EXPECT_FALSE(Ok(refused));
  EXPECT_THAT(ErrorOf(refused), HasSubstr("too many logins in progress"));
  // A slot is given back when a stalled client goes away.
  stalled.pop_back();
  // pgfleet gives the slot back once it has seen the hang-up: retry until it has.
  ConnPtr admitted;
  WaitFor([&] {
    admitted = Connect(fleet.ConnString("md5user", "postgres", "password=md5pass"));
    return Ok(admitted);
  });
  ASSERT_TRUE(Ok(admitted)) << ErrorOf(admitted);
  // Finished logins hold no slot: more clients get in one after another.
  for (int i = 0; i < 3; ++i) {
    auto c = Connect(fleet.ConnString("md5user", "postgres", "password=md5pass"));
    EXPECT_TRUE(Ok(c)) << ErrorOf(c);
  }
  ExpectNoSecretsIn(fleet.Log());
}

class HbaTest : public HostileTest {
 protected:
  // pgfleet with auth.hba_file in a directory of the test's own (written before pgfleet starts,
  // which refuses to start without it) that is also its unix socket directory, for `local` rules.
  // auth.type is scram-sha-256 unless a rule says otherwise.
  std::unique_ptr<PgfleetProcess> Start(const std::string& hba) {
    char tmpl[] = "/tmp/pgfleet-hba-XXXXXX";
    dir_ = mkdtemp(tmpl);
    WriteHba(hba);
    auto fleet = std::make_unique<PgfleetProcess>(
        absl::StrCat(PoolConfig("transaction", 2),
                     "auth:\n  type: scram-sha-256\n  file: userlist.txt\n  hba_file: ", dir_,
                     "/pg_hba.conf\n"),
        Userlist(), absl::StrCat("  unix_socket_dir: ", dir_, "\n"));
    fleet_port_ = fleet->port();
    return fleet;
  }
  void WriteHba(const std::string& hba) { std::ofstream(dir_ + "/pg_hba.conf") << hba; }
  std::string Unix(const std::string& user, const std::string& db) {
    return absl::StrCat("host=", dir_, " port=", fleet_port_, " user=", user, " dbname=", db,
                        " connect_timeout=10");
  }
  void TearDown() override {
    if (!dir_.empty()) RunCommand("rm -rf " + dir_);
  }

  std::string dir_;
  int fleet_port_ = 0;
};

TEST_F(HbaTest, RulesAllowAndDenyAsWritten) {
  pg().Exec("CREATE DATABASE hba_other");  // a second database to tell rules apart
  auto fleet = Start(
      "# pgfleet test rules\n"
      "local  all        all                     trust\n"
      "host   postgres   md5user  127.0.0.1/32   md5\n"
      "host   postgres   postgres 127.0.0.1/32   trust\n"
      "host   hba_other  postgres 127.0.0.1/32   reject\n"
      "host   all        scramuser 10.0.0.0/8    scram-sha-256\n"
      "host   \"all\"      scramuser 127.0.0.1/32  scram-sha-256\n");
  ASSERT_TRUE(fleet->Running()) << fleet->Log();

  // trust overrides auth.type: no password asked.
  auto trusted = Connect(fleet->ConnString("postgres", "postgres"));
  ASSERT_TRUE(Ok(trusted)) << ErrorOf(trusted) << fleet->Log();
  EXPECT_EQ(Value(trusted, "SELECT current_user"), "postgres");
  // md5 as the rule says, with the right and a wrong password.
  auto md5 = Connect(fleet->ConnString("md5user", "postgres", "password=md5pass"));
  ASSERT_TRUE(Ok(md5)) << ErrorOf(md5);
  auto md5_wrong = Connect(fleet->ConnString("md5user", "postgres", "password=nope"));
  EXPECT_FALSE(Ok(md5_wrong));
  EXPECT_THAT(ErrorOf(md5_wrong), HasSubstr("password authentication failed"));
  // An explicit reject rule.
  auto rejected = Connect(fleet->ConnString("postgres", "hba_other"));
  EXPECT_FALSE(Ok(rejected));
  EXPECT_THAT(ErrorOf(rejected),
              HasSubstr("pg_hba.conf rejects connection for host \"127.0.0.1\", user "
                        "\"postgres\", database \"hba_other\""));
  // No rule for this user from 127.0.0.1 (only 10/8, and the quoted "all" is a database name).
  auto unmatched = Connect(fleet->ConnString("scramuser", "postgres", "password=scrampass"));
  EXPECT_FALSE(Ok(unmatched));
  EXPECT_THAT(ErrorOf(unmatched),
              HasSubstr("no pg_hba.conf entry for host \"127.0.0.1\", user \"scramuser\", "
                        "database \"postgres\""));
  // The unix socket matches `local`, which trusts everyone; over TCP otheruser has no rule.
  auto local = Connect(Unix("otheruser", "postgres"));
  ASSERT_TRUE(Ok(local)) << ErrorOf(local);
  EXPECT_EQ(Value(local, "SELECT current_user"), "otheruser");
  auto tcp = Connect(fleet->ConnString("otheruser", "postgres"));
  EXPECT_FALSE(Ok(tcp));
  EXPECT_THAT(ErrorOf(tcp), HasSubstr("no pg_hba.conf entry for host \"127.0.0.1\""));
  // Refusals are 28000, as PostgreSQL sends them.
  RawClient raw(fleet->port());
  ASSERT_TRUE(raw.Send(StartupPacket({{"user", "scramuser"}, {"database", "postgres"}})));
  bool closed = false;
  const ErrorInfo error = FirstError(raw.ReadUntilClose(milliseconds(5000), &closed));
  EXPECT_EQ(error.severity, "FATAL");
  EXPECT_EQ(error.code, "28000");
  EXPECT_TRUE(closed);

  // SIGHUP reloads the rules: now scramuser may log in over TCP with SCRAM, postgres may not.
  WriteHba(
      "host all scramuser 127.0.0.0/8 scram-sha-256\n"
      "host all postgres  127.0.0.1 255.255.255.255 reject\n");
  fleet->Signal(SIGHUP);
  WaitFor([&] { return fleet->Log().find("event=reloaded") != std::string::npos; });
  auto scram = Connect(fleet->ConnString("scramuser", "postgres", "password=scrampass"));
  ASSERT_TRUE(Ok(scram)) << ErrorOf(scram) << fleet->Log();
  EXPECT_EQ(Value(scram, "SELECT current_user"), "scramuser");
  auto now_rejected = Connect(fleet->ConnString("postgres", "postgres"));
  EXPECT_FALSE(Ok(now_rejected));
  EXPECT_THAT(ErrorOf(now_rejected), HasSubstr("pg_hba.conf rejects connection"));
  // A client admitted before the reload keeps its session.
  EXPECT_EQ(Value(trusted, "SELECT 1"), "1");

  // A broken file is refused on reload and the rules in force stay.
  WriteHba("host all all all magic\n");
  fleet->Signal(SIGHUP);
  WaitFor([&] { return fleet->Log().find("event=reload_failed") != std::string::npos; });
  auto still = Connect(fleet->ConnString("scramuser", "postgres", "password=scrampass"));
  EXPECT_TRUE(Ok(still)) << ErrorOf(still);
  const std::string log = fleet->Log();
  EXPECT_THAT(log, HasSubstr("event=reload_failed"));
  EXPECT_THAT(log, HasSubstr("invalid authentication method"));
  EXPECT_THAT(log, HasSubstr("event=client_hba_rejected"));
  ExpectNoSecretsIn(log);
  pg().Exec("DROP DATABASE hba_other");
}

TEST_F(HbaTest, BadHbaFileStopsStartupAndCheckConfigNamesTheLine) {
  char tmpl[] = "/tmp/pgfleet-hba-bad-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::ofstream(dir + "/pg_hba.conf") << "local all all trust\nhost all all example.com md5\n";
  std::ofstream(dir + "/pgfleet.yaml")
      << absl::StrCat("listen: {address: 127.0.0.1, port: 0}\n", PoolConfig("transaction", 1),
                      "auth:\n  type: trust\n  hba_file: pg_hba.conf\n");
  const std::string out = RunCommandOutput(
      absl::StrCat(PgfleetBinary(), " --check-config ", dir, "/pgfleet.yaml 2>&1; echo rc=$?"));
  EXPECT_THAT(out, HasSubstr(dir + "/pg_hba.conf:2: invalid IP address \"example.com\""));
  EXPECT_THAT(out, Not(HasSubstr("rc=0")));
  RunCommand("rm -rf " + dir);
}

}  // namespace hostile_test
}  // namespace pgfleet::testing
