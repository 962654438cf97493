// A pgfleet-controller process for one test: writes its config, starts the binary, waits until
// its gRPC port accepts, and can be killed, paused (SIGSTOP) and restarted on the same port.
#pragma once

#include <sys/types.h>

#include <string>

namespace pgfleet::testing {

class ControllerProcess {
 public:
  // `config_body`: YAML without `controller:` and `metrics:`, usually `databases:` with budgets
  // and `peering: {token_file: ...}`. `controller_keys`: lines for the `controller:` mapping
  // besides `listen` (which gets a free port), each indented by two spaces.
  ControllerProcess(const std::string& config_body, const std::string& controller_keys);
  ~ControllerProcess();

  // Starts (or starts again) on the same ports; waits until the gRPC port accepts.
  void Start();
  // SIGKILL and reap.
  void Kill();
  void Signal(int signo) const;
  bool Running();

  int port() const { return port_; }
  std::string address() const;
  // The text of GET /metrics ("" when it does not answer).
  std::string Metrics() const;
  // The value of the first sample whose line starts with `series` (-1 when absent).
  double Sample(const std::string& series) const;
  std::string Log() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::string config_path_;
  int port_ = 0;
  int metrics_port_ = 0;
  pid_t pid_ = -1;
  int starts_ = 0;
};

// Path of the pgfleet-controller binary under test.
std::string ControllerBinary();

}  // namespace pgfleet::testing
