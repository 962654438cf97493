// A real PostgreSQL server for integration tests: initdb in a temporary directory, loopback only,
// a free port, run as the unprivileged `postgres` account when the tests run as root. The binaries
// come from PG_BINDIR (default: Debian's newest /usr/lib/postgresql/<major>/bin); the shared
// server logs its version() once, and PG_EXPECT_MAJOR, when set, must be its major.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace pgfleet::testing {

struct PgServerOptions {
  std::string bindir;  // empty: PG_BINDIR, else Debian's newest
  int port = 0;        // 0: FreePort()
};

class PgServer {
 public:
  // The application_name of the harness's own one-query connections (QueryValue).
  static constexpr const char* kProbeApplicationName = "pgfleet_harness_probe";

  // The one server shared by every test in this process (started on first use).
  static PgServer& Shared();

  // A server of its own on `port`, for tests that need PostgreSQL to appear on an address later:
  // initdb runs here, Start() starts it. Stopped, and its directory removed, when destroyed.
  explicit PgServer(int port);
  // The same with a chosen major's binaries (or the default) and port (or a free one).
  explicit PgServer(const PgServerOptions& options);

  // A streaming standby of the running `primary` (pg_basebackup -R from it), on its own port,
  // started and in recovery when this returns.
  static std::unique_ptr<PgServer> StandbyOf(const PgServer& primary,
                                             const PgServerOptions& options = {});
  // pg_ctl promote; returns once the server is out of recovery.
  void Promote();
  // A stopped former primary becomes a standby of `new_primary`: its data directory is replaced
  // by a base backup of the new primary's; it keeps its port, and is started and in recovery when
  // this returns.
  void RebuildAsStandbyOf(const PgServer& new_primary);
  bool InRecovery() const;
  PgServer(const PgServer&) = delete;
  PgServer& operator=(const PgServer&) = delete;
  ~PgServer();

  int port() const { return port_; }
  const std::string& socket_dir() const { return dir_; }
  // A libpq connection string straight to PostgreSQL as the superuser.
  std::string ConnString(const std::string& dbname = "postgres") const;

  // Runs SQL as the superuser; aborts the test binary on failure.
  void Exec(const std::string& sql, const std::string& dbname = "postgres") const;
  // The first column of the first row, as text.
  std::string QueryValue(const std::string& sql, const std::string& dbname = "postgres") const;

  // Turns on ssl with this certificate and key (copied into the data directory) and makes the
  // role `tlsonly` TLS-only (hostssl scram-sha-256; plain text rejected). Idempotent.
  void EnableTls(const std::string& cert_file, const std::string& key_file);

  void Start();
  // Fast shutdown (clients are disconnected).
  void Stop();
  void Restart();
  bool running() const { return running_; }

 private:
  PgServer();
  // A server without a data directory yet (StandbyOf).
  PgServer(const std::string& default_bindir, const PgServerOptions& options);
  void Init();
  void RunAsOwner(const std::string& command) const;
  // The data directory from a base backup of `primary`, configured as this server's standby.
  void BaseBackupFrom(const PgServer& primary);
  // QueryValue that answers nullopt instead of aborting (for polls while a server starts).
  std::optional<std::string> TryQueryValue(const std::string& sql) const;
  // Waits (bounded) until pg_is_in_recovery() is `in_recovery`; aborts with a message otherwise.
  void WaitForRecovery(bool in_recovery) const;

  std::string dir_;
  std::string bindir_;
  int port_ = 0;
  bool running_ = false;
  bool shared_ = false;  // Shared(): removed at exit, not when destroyed
  bool tls_enabled_ = false;
};

// Picks a TCP port on 127.0.0.1 that is free right now and that no earlier call returned.
int FreePort();
// Runs a shell command, returns its exit status.
int RunCommand(const std::string& command);
// Runs a shell command and returns its stdout.
std::string RunCommandOutput(const std::string& command);

}  // namespace pgfleet::testing
