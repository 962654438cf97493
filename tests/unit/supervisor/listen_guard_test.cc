// Tests for pooler/supervisor/listen_guard.h: one pgfleet per address and port.
#include "pooler/supervisor/listen_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pgfleet::supervisor {
namespace {

using ::testing::HasSubstr;

class ListenGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/listen-guard-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (int fd : fds_) close(fd);
    std::filesystem::remove_all(dir_);
  }
  // A loopback TCP listener on a free port, with SO_REUSEPORT as pgfleet's own listeners have.
  int ListenReusePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd, 8), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    fds_.push_back(fd);
    return ntohs(addr.sin_port);
  }
  // A port nothing listens on (bound, then closed).
  int FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    return ntohs(addr.sin_port);
  }

  std::string dir_;
  std::vector<int> fds_;
};

TEST_F(ListenGuardTest, AFreePortIsTakenAndItsLockGoesWithTheGuard) {
  const int port = FreePort();
  {
    ListenGuard guard;
    ASSERT_TRUE(guard.Acquire("127.0.0.1", port, "").ok());
    EXPECT_TRUE(guard.locked());
  }
  ListenGuard again;
  EXPECT_TRUE(again.Acquire("127.0.0.1", port, "").ok());
  // Port 0 (the kernel picks one): nothing to lock.
  ListenGuard any_port;
  EXPECT_TRUE(any_port.Acquire("127.0.0.1", 0, "").ok());
  EXPECT_FALSE(any_port.locked());
}

TEST_F(ListenGuardTest, AKilledHoldersLockIsFreeWithNothingLeftBehind) {
  const int port = FreePort();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ListenGuard guard;
    const char ok = guard.Acquire("127.0.0.1", port, "").ok() ? 'y' : 'n';
    if (write(ready[1], &ok, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  close(ready[0]);
  ASSERT_EQ(ok, 'y');
  ListenGuard refused;
  const absl::Status status = refused.Acquire("127.0.0.1", port, "");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("pid ", child)));
  // SIGKILL: no destructor runs, and the kernel frees the name with the socket.
  kill(child, SIGKILL);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ListenGuard next;
  EXPECT_TRUE(next.Acquire("127.0.0.1", port, "").ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir_));  // no file anywhere of ours
}

TEST_F(ListenGuardTest, ASecondGuardOnTheSameAddressIsRefusedWithTheFirstsPid) {
  const int port = FreePort();
  ListenGuard first;
  ASSERT_TRUE(first.Acquire("127.0.0.1", port, "").ok());
  ListenGuard second;
  const absl::Status status = second.Acquire("127.0.0.1", port, "");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("pid ", getpid())));
  // Another port is another lock.
  ListenGuard other;
  EXPECT_TRUE(other.Acquire("127.0.0.1", FreePort(), "").ok());
}

TEST_F(ListenGuardTest, AReusePortListenerIsRefusedAndNamed) {
  const int port = ListenReusePort();
  ListenGuard guard;
  const absl::Status status = guard.Acquire("127.0.0.1", port, "");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(status.message(), HasSubstr("address already in use"));
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("pid ", getpid())));
  // A wildcard address conflicts with it too.
  ListenGuard any;
  EXPECT_EQ(any.Acquire("*", port, "").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(FindTcpListener("127.0.0.1", port).rfind(absl::StrCat("pid ", getpid()), 0), 0u);
  EXPECT_EQ(FindTcpListener("127.0.0.1", FreePort()), "");
}

TEST_F(ListenGuardTest, ALiveUnixSocketIsRefusedAndAStaleOneIsNot) {
  const int port = FreePort();
  const std::string path = absl::StrCat(dir_, "/.s.PGSQL.", port);
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 8), 0);
  const absl::Status live = ListenGuard::CheckUnixSocketFree(dir_, port);
  EXPECT_EQ(live.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(live.message(), HasSubstr(path));
  close(fd);  // the file stays, nobody accepts: stale
  EXPECT_TRUE(ListenGuard::CheckUnixSocketFree(dir_, port).ok());
  EXPECT_TRUE(ListenGuard::CheckUnixSocketFree(dir_, port + 1).ok());
}

}  // namespace
}  // namespace pgfleet::supervisor
