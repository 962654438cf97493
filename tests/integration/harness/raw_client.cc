// Minimal wire client.
#include "tests/integration/harness/raw_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

namespace pgfleet::testing {
namespace {

std::string Int32(uint32_t v) {
  std::string s(4, '\0');
  s[0] = static_cast<char>(v >> 24);
  s[1] = static_cast<char>(v >> 16);
  s[2] = static_cast<char>(v >> 8);
  s[3] = static_cast<char>(v);
  return s;
}

std::string Message(char type, const std::string& body) {
  return std::string(1, type) + Int32(static_cast<uint32_t>(body.size() + 4)) + body;
}

std::string CStr(const std::string& s) { return s + std::string(1, '\0'); }

}  // namespace

RawClient::~RawClient() {
  if (fd_ >= 0) close(fd_);
}

namespace {

int Dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

bool RawClient::Connect(int port, const std::string& user, const std::string& database,
                        uint32_t version,
                        const std::vector<std::pair<std::string, std::string>>& extra) {
  fd_ = Dial(port);
  if (fd_ < 0) {
    error_ = "connect failed";
    return false;
  }
  std::string body = Int32(version) + CStr("user") + CStr(user) + CStr("database") + CStr(database);
  for (const auto& [name, value] : extra) body += CStr(name) + CStr(value);
  body += std::string(1, '\0');
  if (!Send(Int32(static_cast<uint32_t>(body.size() + 4)) + body)) return false;
  login_messages_ = ReadUntilReady(1);
  for (const auto& m : login_messages_) {
    if (m.type == 'E') {
      error_ = m.body;
      return false;
    }
    if (m.type == 'K' && m.body.size() >= 8) {
      backend_pid_ = (static_cast<uint32_t>(static_cast<uint8_t>(m.body[0])) << 24) |
                     (static_cast<uint32_t>(static_cast<uint8_t>(m.body[1])) << 16) |
                     (static_cast<uint32_t>(static_cast<uint8_t>(m.body[2])) << 8) |
                     static_cast<uint8_t>(m.body[3]);
      backend_secret_ = m.body.substr(4);
    }
  }
  return !login_messages_.empty() && login_messages_.back().type == 'Z';
}

bool RawClient::SendCancel(int port, uint32_t pid, const std::string& secret) {
  const int fd = Dial(port);
  if (fd < 0) return false;
  const std::string body = Int32(80877102) + Int32(pid) + secret;
  const std::string packet = Int32(static_cast<uint32_t>(body.size() + 4)) + body;
  const bool sent =
      send(fd, packet.data(), packet.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(packet.size());
  // The server closes the connection once it has read the request.
  char byte;
  pollfd pfd = {fd, POLLIN, 0};
  if (sent && poll(&pfd, 1, 5000) > 0) (void)recv(fd, &byte, 1, 0);
  close(fd);
  return sent;
}

std::string RawClient::Query(const std::string& sql) { return Message('Q', CStr(sql)); }

bool RawClient::Send(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      error_ = "send failed";
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

bool RawClient::ReadMessage(RawMessage* out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (true) {
    if (buffer_.size() >= 5) {
      uint32_t len = (static_cast<uint8_t>(buffer_[1]) << 24) |
                     (static_cast<uint8_t>(buffer_[2]) << 16) |
                     (static_cast<uint8_t>(buffer_[3]) << 8) | static_cast<uint8_t>(buffer_[4]);
      if (buffer_.size() >= len + 1) {
        out->type = buffer_[0];
        out->body = buffer_.substr(5, len - 4);
        buffer_.erase(0, len + 1);
        return true;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      error_ = "timeout";
      return false;
    }
    pollfd pfd = {fd_, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    char chunk[65536];
    ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      error_ = "connection closed";
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

std::vector<RawMessage> RawClient::ReadUntilReady(int count) {
  std::vector<RawMessage> out;
  RawMessage m;
  while (count > 0 && ReadMessage(&m)) {
    out.push_back(m);
    if (m.type == 'Z') --count;
  }
  return out;
}

std::string RawClient::Parse(const std::string& name, const std::string& sql) {
  return Message('P', CStr(name) + CStr(sql) + std::string(2, '\0'));
}
std::string RawClient::Bind(const std::string& statement) {
  return Message('B', CStr("") + CStr(statement) + std::string(6, '\0'));
}
std::string RawClient::Execute() { return Message('E', CStr("") + std::string(4, '\0')); }
std::string RawClient::Close(char kind, const std::string& name) {
  return Message('C', std::string(1, kind) + CStr(name));
}
std::string RawClient::Describe(char kind, const std::string& name) {
  return Message('D', std::string(1, kind) + CStr(name));
}
std::string RawClient::Sync() { return Message('S', ""); }

std::string Types(const std::vector<RawMessage>& messages) {
  std::string out;
  for (const auto& m : messages) out.push_back(m.type);
  return out;
}

}  // namespace pgfleet::testing
