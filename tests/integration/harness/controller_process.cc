// pgfleet-controller process control for tests.
#include "tests/integration/harness/controller_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/integration/harness/pg_server.h"
#include "tests/integration/harness/sanitizer_report.h"
#include "tests/integration/harness/wait.h"

namespace pgfleet::testing {

std::string ControllerBinary() {
  if (const char* env = std::getenv("PGFLEET_CONTROLLER_BIN")) return env;
  return PGFLEET_CONTROLLER_BINARY_PATH;
}

ControllerProcess::ControllerProcess(const std::string& config_body,
                                     const std::string& controller_keys) {
  char tmpl[] = "/tmp/pgfleet-ctl-XXXXXX";
  dir_ = mkdtemp(tmpl);
  port_ = FreePort();
  metrics_port_ = FreePort();
  config_path_ = dir_ + "/pgfleet.yaml";
  std::ofstream(config_path_) << config_body << "\ncontroller:\n  listen: 127.0.0.1:" << port_
                              << "\n"
                              << controller_keys
                              << "\nmetrics:\n  listen: 127.0.0.1:" << metrics_port_ << "\n";
  Start();
}

ControllerProcess::~ControllerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGCONT);
    kill(pid_, SIGTERM);
    WaitFor([&] { return !Running(); }, std::chrono::seconds(2), std::chrono::milliseconds(50));
    Kill();
  }
  if (const std::string report = SanitizerReport(Log()); !report.empty()) {
    ADD_FAILURE() << "sanitizer report in the log of pgfleet-controller (" << dir_ << "):\n"
                  << report;
  }
  RunCommand(absl::StrCat("rm -rf ", dir_));
}

std::string ControllerProcess::address() const { return absl::StrCat("127.0.0.1:", port_); }

void ControllerProcess::Start() {
  const std::string log_path = absl::StrCat(dir_, "/controller.log");
  pid_ = fork();
  if (pid_ == 0) {
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::string bin = ControllerBinary();
    execl(bin.c_str(), bin.c_str(), "--config", config_path_.c_str(), nullptr);
    _exit(127);
  }
  ++starts_;
  bool accepting = false;
  WaitFor(
      [&] {
        accepting = RunCommand(absl::StrCat("bash -c 'exec 3<>/dev/tcp/127.0.0.1/", port_,
                                            "' 2>/dev/null")) == 0;
        return accepting || !Running();
      },
      std::chrono::seconds(5), std::chrono::milliseconds(25));
  if (accepting) return;
  std::fprintf(stderr, "pgfleet-controller did not start; log:\n%s\n", Log().c_str());
}

void ControllerProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void ControllerProcess::Signal(int signo) const {
  if (pid_ > 0) kill(pid_, signo);
}

bool ControllerProcess::Running() {
  if (pid_ <= 0) return false;
  int status;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

std::string ControllerProcess::Metrics() const {
  return RunCommandOutput(absl::StrCat(
      "bash -c 'exec 3<>/dev/tcp/127.0.0.1/", metrics_port_,
      " && printf \"GET /metrics HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n\" >&3 && timeout 2 cat <&3' "
      "2>/dev/null"));
}

double ControllerProcess::Sample(const std::string& series) const {
  for (absl::string_view line : absl::StrSplit(Metrics(), '\n')) {
    if (!absl::ConsumePrefix(&line, series)) continue;
    if (line.empty() || (line[0] != ' ' && line[0] != '{')) continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    if (space != absl::string_view::npos && absl::SimpleAtod(line.substr(space + 1), &value)) {
      return value;
    }
  }
  return -1;
}

std::string ControllerProcess::Log() const {
  std::ifstream in(dir_ + "/controller.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace pgfleet::testing
