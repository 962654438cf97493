// Tests for pooler/net/fd_passing.h over real unix sockets of this process: a descriptor sent
// with a message arrives as a working duplicate, messages without one, too-long messages fail
// without leaking what they carried, and the listen/connect/accept path.
#include "pooler/net/fd_passing.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace pgfleet::net {
namespace {

// The number of descriptors this process has open, to see that nothing leaked.
int OpenFdCount() {
  int count = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the directory's own descriptor
}

class FdPassingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sockets_), 0);
    ASSERT_EQ(pipe2(pipe_, O_CLOEXEC), 0);
  }
  void TearDown() override {
    for (int fd : {sockets_[0], sockets_[1], pipe_[0], pipe_[1]}) {
      if (fd >= 0) close(fd);
    }
  }

  int sockets_[2] = {-1, -1};
  int pipe_[2] = {-1, -1};
  std::string buffer_;  // one for every receive, as a channel keeps it
};

TEST_F(FdPassingTest, SentDescriptorWorksOnTheOtherSide) {
  ASSERT_TRUE(SendWithFd(sockets_[0], "server", pipe_[1]).ok());
  // The sender keeps its own descriptor; closing it leaves the received duplicate working.
  close(pipe_[1]);
  pipe_[1] = -1;

  auto received = ReceiveWithFd(sockets_[1], 64, buffer_);
  ASSERT_TRUE(received.ok()) << received.status();
  ASSERT_TRUE(received->has_value());
  EXPECT_EQ((*received)->bytes, "server");
  int fd = (*received)->fd;
  ASSERT_GE(fd, 0);
  EXPECT_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  ASSERT_EQ(write(fd, "ping", 4), 4);
  close(fd);
  char buf[8] = {};
  ASSERT_EQ(read(pipe_[0], buf, sizeof(buf)), 4);
  EXPECT_EQ(std::string(buf, 4), "ping");
}

TEST_F(FdPassingTest, MessageWithoutDescriptor) {
  ASSERT_TRUE(SendWithFd(sockets_[0], "request", -1).ok());
  ASSERT_TRUE(SendWithFd(sockets_[0], std::string(64, 'x'), -1).ok());
  auto received = ReceiveWithFd(sockets_[1], 64, buffer_);
  ASSERT_TRUE(received.ok()) << received.status();
  ASSERT_TRUE(received->has_value());
  EXPECT_EQ((*received)->bytes, "request");
  EXPECT_EQ((*received)->fd, -1);
  // Exactly max_bytes is not a truncation.
  received = ReceiveWithFd(sockets_[1], 64, buffer_);
  ASSERT_TRUE(received.ok()) << received.status();
  ASSERT_TRUE(received->has_value());
  EXPECT_EQ((*received)->bytes, std::string(64, 'x'));
}

TEST_F(FdPassingTest, NothingWaitingIsNullopt) {
  auto received = ReceiveWithFd(sockets_[1], 64, buffer_);
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_FALSE(received->has_value());
}

TEST_F(FdPassingTest, TooLongMessageIsAnErrorAndLeaksNoDescriptor) {
  int before = OpenFdCount();
  ASSERT_TRUE(SendWithFd(sockets_[0], std::string(65, 'x'), pipe_[1]).ok());
  auto received = ReceiveWithFd(sockets_[1], 64, buffer_);
  EXPECT_FALSE(received.ok());
  EXPECT_EQ(OpenFdCount(), before);
  // The descriptor that came was closed: with the sender's closed too, the pipe has no writer.
  close(pipe_[1]);
  pipe_[1] = -1;
  char byte;
  EXPECT_EQ(read(pipe_[0], &byte, 1), 0);
  // The socket goes on with the next message.
  ASSERT_TRUE(SendWithFd(sockets_[0], "next", -1).ok());
  received = ReceiveWithFd(sockets_[1], 64, buffer_);
  ASSERT_TRUE(received.ok()) << received.status();
  ASSERT_TRUE(received->has_value());
  EXPECT_EQ((*received)->bytes, "next");
}

TEST_F(FdPassingTest, FullSocketIsUnavailable) {
  std::string big(4096, 'x');
  absl::Status status;
  for (int i = 0; i < 100000 && status.ok(); ++i) status = SendWithFd(sockets_[0], big, -1);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
}

TEST_F(FdPassingTest, SendToClosedPeerIsAnErrorNotSigpipe) {
  close(sockets_[1]);
  sockets_[1] = -1;
  EXPECT_FALSE(SendWithFd(sockets_[0], "x", pipe_[1]).ok());
}

TEST(SeqpacketTest, ListenConnectAccept) {
  char dir_template[] = "/tmp/pgfleet_fd_passing_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  std::string path = std::string(dir_template) + "/handoff.sock";
  // A stale file at the path is replaced.
  int stale = open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(stale, 0);
  close(stale);

  auto listener = ListenSeqpacket(path);
  ASSERT_TRUE(listener.ok()) << listener.status();
  EXPECT_NE(fcntl(*listener, F_GETFL) & O_NONBLOCK, 0);
  EXPECT_EQ(fcntl(*listener, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  auto none = AcceptSeqpacket(*listener);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, -1);

  auto client = ConnectSeqpacket(path);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_NE(fcntl(*client, F_GETFL) & O_NONBLOCK, 0);
  EXPECT_EQ(fcntl(*client, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  auto server = AcceptSeqpacket(*listener);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GE(*server, 0);
  EXPECT_NE(fcntl(*server, F_GETFL) & O_NONBLOCK, 0);
  EXPECT_EQ(fcntl(*server, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);

  ASSERT_TRUE(SendWithFd(*client, "hello", -1).ok());
  std::string buffer;
  auto received = ReceiveWithFd(*server, 16, buffer);
  ASSERT_TRUE(received.ok()) << received.status();
  ASSERT_TRUE(received->has_value());
  EXPECT_EQ((*received)->bytes, "hello");

  close(*server);
  close(*client);
  close(*listener);
  EXPECT_FALSE(ConnectSeqpacket(path).ok());  // nobody listens any more
  unlink(path.c_str());
  rmdir(dir_template);
}

TEST(SeqpacketTest, TooLongPathIsRejected) {
  EXPECT_FALSE(ListenSeqpacket(std::string(200, 'p')).ok());
  EXPECT_FALSE(ConnectSeqpacket("").ok());
}

}  // namespace
}  // namespace pgfleet::net
