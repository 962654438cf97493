// A pgfleet process for one test: writes its config (and userlist), starts the binary, waits until
// it accepts connections, and stops it by PID at the end.
#pragma once

#include <sys/types.h>

#include <string>

namespace pgfleet::testing {

class PgfleetProcess {
 public:
  // `config_body` is YAML without the `listen:` section (added with a free port), or a
  // pgbouncer.ini without listen_addr, listen_port and auth_file (added likewise).
  // `userlist` is the auth file's content (empty = none written).
  // `listen_extra` adds keys to the listen section (e.g. "  unix_socket_dir: /tmp/x\n").
  // `address` is where it listens for clients (another loopback address, such as 127.0.0.2,
  // stands in for another pod).
  // `output` is where its stdout and stderr go (e.g. /dev/full); empty = a file Log() reads.
  PgfleetProcess(const std::string& config_body, const std::string& userlist = "",
                 const std::string& listen_extra = "", const std::string& address = "127.0.0.1",
                 const std::string& output = "");
  ~PgfleetProcess();

  int port() const { return port_; }
  const std::string& address() const { return address_; }
  // Where /metrics, /healthz and /readyz listen (unless the config sets metrics itself).
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  const std::string& config_path() const { return config_path_; }

  // libpq connection string through pgfleet.
  std::string ConnString(const std::string& user = "postgres",
                         const std::string& dbname = "postgres",
                         const std::string& extra = "") const;

  void Signal(int signo) const;
  // Rewrites the config file (for reload tests).
  void RewriteConfig(const std::string& config_body) const;
  // SIGTERM, wait up to `timeout_s`, then SIGKILL. Returns the exit status (or -1 if killed).
  int Stop(int timeout_s = 10);
  bool Running();
  std::string Log() const;

 private:
  std::string WriteConfig(const std::string& config_body) const;
  // A config body that starts with a section ("[databases]") is a pgbouncer.ini.
  static bool IsIni(const std::string& config_body);

  std::string listen_extra_;
  std::string address_;
  std::string dir_;
  std::string config_path_;
  int port_ = 0;
  int metrics_port_ = 0;
  pid_t pid_ = -1;
};

// Path of the pgfleet binary under test.
std::string PgfleetBinary();

}  // namespace pgfleet::testing
