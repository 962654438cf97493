// pgfleet process control for tests.
#include "tests/integration/harness/pgfleet_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/harness/pg_server.h"
#include "tests/integration/harness/sanitizer_report.h"
#include "tests/integration/harness/wait.h"

namespace pgfleet::testing {

std::string PgfleetBinary() {
  if (const char* env = std::getenv("PGFLEET_BIN")) return env;
  return PGFLEET_BINARY_PATH;
}

PgfleetProcess::PgfleetProcess(const std::string& config_body, const std::string& userlist,
                               const std::string& listen_extra, const std::string& address,
                               const std::string& output)
    : listen_extra_(listen_extra), address_(address) {
  char tmpl[] = "/tmp/pgfleet-it-XXXXXX";
  dir_ = mkdtemp(tmpl);
  port_ = FreePort();
  metrics_port_ = FreePort();
  if (!userlist.empty()) std::ofstream(dir_ + "/userlist.txt") << userlist;
  config_path_ = dir_ + (IsIni(config_body) ? "/pgbouncer.ini" : "/pgfleet.yaml");
  std::ofstream(config_path_) << WriteConfig(config_body);
  const std::string log_path = output.empty() ? dir_ + "/pgfleet.log" : output;
  pid_ = fork();
  if (pid_ == 0) {
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | (output.empty() ? O_TRUNC : 0), 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::string bin = PgfleetBinary();
    execl(bin.c_str(), bin.c_str(), "--config", config_path_.c_str(), nullptr);
    _exit(127);
  }
  // Ready when the TCP port accepts (bounded wait; not for a process that already exited).
  bool accepting = false;
  WaitFor(
      [&] {
        // The first of several addresses (listen_addr = a,b).
        const std::string first = address_.substr(0, address_.find(','));
        accepting = RunCommand(absl::StrCat("bash -c 'exec 3<>/dev/tcp/", first, "/", port_,
                                            "' 2>/dev/null")) == 0;
        return accepting || !Running();
      },
      std::chrono::seconds(5), std::chrono::milliseconds(25));
  if (accepting) return;
  std::fprintf(stderr, "pgfleet did not start; log:\n%s\n", Log().c_str());
}

PgfleetProcess::~PgfleetProcess() {
  Stop(5);
  if (const std::string report = SanitizerReport(Log()); !report.empty()) {
    ADD_FAILURE() << "sanitizer report in the log of pgfleet (" << dir_ << "):\n" << report;
  }
  RunCommand(absl::StrCat("rm -rf ", dir_));
}

bool PgfleetProcess::IsIni(const std::string& config_body) {
  const size_t first = config_body.find_first_not_of(" \t\n");
  return first != std::string::npos && (config_body[first] == '[' || config_body[first] == ';');
}

std::string PgfleetProcess::WriteConfig(const std::string& config_body) const {
  if (IsIni(config_body)) {
    // A pgbouncer.ini: the address, port and /metrics as for YAML, an auth_file in this
    // directory when a userlist was given, and no unix socket in /tmp.
    const bool userlist = std::ifstream(dir_ + "/userlist.txt").good();
    return absl::StrCat(config_body, "\n[pgbouncer]\nlisten_addr = ", address_,
                        "\nlisten_port = ", port_, "\nunix_socket_dir =\n",
                        userlist ? absl::StrCat("auth_file = ", dir_, "/userlist.txt\n") : "",
                        "[pgfleet]\nmetrics.listen = 127.0.0.1:", metrics_port_, "\n");
  }
  // /metrics on a free port too (the default, 9127, would collide between concurrent runs),
  // unless the test configures metrics itself.
  std::string metrics;
  if (config_body.find("\nmetrics:") == std::string::npos &&
      config_body.rfind("metrics:", 0) == std::string::npos) {
    metrics = absl::StrCat("\nmetrics:\n  listen: 127.0.0.1:", metrics_port_, "\n");
  }
  return absl::StrCat("listen:\n  address: ", address_, "\n  port: ", port_, "\n", listen_extra_,
                      config_body, metrics);
}

void PgfleetProcess::RewriteConfig(const std::string& config_body) const {
  std::ofstream(config_path_) << WriteConfig(config_body);
}

std::string PgfleetProcess::ConnString(const std::string& user, const std::string& dbname,
                                       const std::string& extra) const {
  return absl::StrCat("host=", address_, " port=", port_, " user=", user, " dbname=", dbname,
                      " connect_timeout=10 ", extra);
}

void PgfleetProcess::Signal(int signo) const {
  if (pid_ > 0) kill(pid_, signo);
}

bool PgfleetProcess::Running() {
  if (pid_ <= 0) return false;
  int status;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;  // reaped: never signal this pid again
    return false;
  }
  return true;
}

int PgfleetProcess::Stop(int timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  if (WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; },
              std::chrono::seconds(timeout_s), std::chrono::milliseconds(50))) {
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return -1;
}

std::string PgfleetProcess::Log() const {
  std::ifstream in(dir_ + "/pgfleet.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace pgfleet::testing
