// A minimal blocking HTTP/1.1 GET over loopback, for tests of /metrics, /healthz and /readyz
// (and Prometheus's API) without a client library.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace pgfleet::testing {

// GETs http://127.0.0.1:`port``path`. Returns the status code (and the body in `body`), or -1
// when nothing answers.
inline int HttpGet(int port, const std::string& path, std::string* body = nullptr) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  const std::string request =
      "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return -1;
  }
  std::string response;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
  close(fd);
  // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody"
  if (response.size() < 12 || response.compare(0, 5, "HTTP/") != 0) return -1;
  const int status = std::atoi(response.c_str() + 9);
  if (body != nullptr) {
    const size_t split = response.find("\r\n\r\n");
    *body = split == std::string::npos ? "" : response.substr(split + 4);
  }
  return status;
}

// The sum over every series (every worker) of metric `name` in the /metrics served on `port`, or
// -1 when nothing answers.
inline double MetricSum(int port, const std::string& name) {
  std::string body;
  if (HttpGet(port, "/metrics", &body) != 200) return -1;
  double sum = 0;
  for (auto line : absl::StrSplit(body, '\n')) {
    if (!absl::StartsWith(line, name) || line.size() <= name.size() ||
        (line[name.size()] != '{' && line[name.size()] != ' ')) {
      continue;
    }
    double value = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) sum += value;
  }
  return sum;
}

}  // namespace pgfleet::testing
