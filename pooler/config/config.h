// pgfleet's configuration as plain structs with PgBouncer's defaults; yaml_loader.cc fills them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pgfleet::config {

enum class PoolMode { kSession, kTransaction, kStatement };
// What transaction and statement pooling do with session state a client creates (SET, temporary
// tables, SQL PREPARE, advisory locks, cursors WITH HOLD, LISTEN): carry settings to the client's
// next server and keep its server while it holds state that cannot move ("track"), answer such
// statements with an ERROR ("refuse"), or relay them as PgBouncer does ("pass").
enum class SessionState { kTrack, kRefuse, kPass };
std::string_view SessionStateName(SessionState mode);
std::optional<SessionState> ParseSessionState(std::string_view name);
// kCert: the client's verified TLS certificate's CommonName is its user name (PgBouncer's cert);
// kPeer: the unix socket peer's operating-system user is (hba `peer` lines only).
// kPlain: PgBouncer's `plain`, the password in clear text (hba `password`), checked against any
// stored secret. kAny: PgBouncer's `any`, trust that ignores the user name (every database logs
// in to PostgreSQL as its own `user`).
enum class AuthType { kTrust, kMd5, kScramSha256, kCert, kPeer, kPlain, kAny };
// PgBouncer's client_tls_sslmode / server_tls_sslmode values (libpq's sslmode names).
enum class SslMode { kDisable, kAllow, kPrefer, kRequire, kVerifyCa, kVerifyFull };

// The YAML spelling of each enum value ("transaction", "scram-sha-256").
std::string_view PoolModeName(PoolMode mode);
std::string_view AuthTypeName(AuthType type);
// Inverses of the above, for the exact YAML spelling; nullopt for anything else.
std::optional<PoolMode> ParsePoolMode(std::string_view name);
std::optional<AuthType> ParseAuthType(std::string_view name);
std::string_view SslModeName(SslMode mode);
std::optional<SslMode> ParseSslMode(std::string_view name);

// libpq's target_session_attrs: which servers of a database's hosts a new server connection may
// use, judged at login from in_hot_standby and default_transaction_read_only.
enum class TargetSessionAttrs { kAny, kReadWrite, kReadOnly, kPrimary, kStandby, kPreferStandby };
// libpq's load_balance_hosts: try the hosts in order, or in random order.
enum class LoadBalanceHosts { kDisable, kRandom };
std::string_view TargetSessionAttrsName(TargetSessionAttrs attrs);
std::optional<TargetSessionAttrs> ParseTargetSessionAttrs(std::string_view name);
std::string_view LoadBalanceHostsName(LoadBalanceHosts mode);
std::optional<LoadBalanceHosts> ParseLoadBalanceHosts(std::string_view name);

// One PostgreSQL address: a host name, IP, or a unix socket directory (starts with '/'), and its
// port.
struct HostAddress {
  std::string host;
  int port = 5432;
  bool operator==(const HostAddress&) const = default;
};

struct ListenConfig {
  std::string address = "127.0.0.1";  // "*" or "0.0.0.0" = all IPv4; "::" = all IPv6
  int port = 6432;                    // 0 = pick a free port (logged at start)
  std::string unix_socket_dir;        // empty = no unix socket; socket is .s.PGSQL.<port>
  // PgBouncer's unix_socket_mode and unix_socket_group: the socket file's mode and group.
  int unix_socket_mode = 0777;
  std::string unix_socket_group;  // empty = the process's group
  int backlog = 1024;
  // Even client balance across the pod's workers (docs/architecture.md, "Client balance"): a
  // worker that holds more clients than a sibling passes a new connection to the one with the
  // fewest before reading from it. Off: the kernel's SO_REUSEPORT hash alone spreads them.
  bool balance_clients = true;

  // `address` may list several, comma-separated (PgBouncer's listen_addr): each is listened on.
  std::vector<std::string> Addresses() const;
};

// Settings a database may override; unset fields take the `pool:` section's value.
struct PoolOverrides {
  std::optional<PoolMode> pool_mode;
  std::optional<SessionState> session_state;
  std::optional<int> pool_size;
  std::optional<int> min_pool_size;
  std::optional<int> reserve_pool_size;
};

struct DatabaseConfig {
  std::string name;  // what clients connect to (the YAML key); "*" is the fallback entry
  // libpq's host and port lists: one or more hosts ("a,b" or a YAML list), and one port for all
  // of them or one per host. Addresses() pairs them.
  std::vector<std::string> hosts = {"127.0.0.1"};
  std::vector<int> ports = {5432};
  TargetSessionAttrs target_session_attrs = TargetSessionAttrs::kAny;
  LoadBalanceHosts load_balance_hosts = LoadBalanceHosts::kDisable;
  std::string dbname;    // empty = same as `name` (or the client's requested name for "*")
  std::string user;      // force this server user (empty = the client's user)
  std::string password;  // password for `user` toward the server (else from auth file)
  PoolOverrides overrides;
  // 0 = unlimited; fleet-wide total. The loader copies pool.max_db_connections here when the
  // database does not set it, so this is always the value to enforce.
  int max_db_connections = 0;
  // Clients connected to this database in the whole pod (PgBouncer's max_db_client_connections);
  // 0 = unlimited. The loader copies pool.max_db_client_connections here likewise.
  int max_db_client_connections = 0;
  std::string application_name;  // optional fixed application_name toward the server
  // PgBouncer's connect_query: run once on every new server of the database, after its login and
  // before any client gets it (settings, warm-up).
  std::string connect_query;
  // PgBouncer's per-database client_encoding, datestyle and timezone: sent at every server login,
  // so they are the server's defaults (and what clients that set none are told).
  std::vector<std::pair<std::string, std::string>> server_settings;
  // Over pool.server_lifetime for this database's servers (PgBouncer's per-database key).
  std::optional<absl::Duration> server_lifetime;
  // PgBouncer's per-database auth_user, auth_query and auth_dbname: empty = the auth section's.
  std::string auth_user;
  std::string auth_query;
  std::string auth_dbname;
  // Set only on FindDatabase's result: true when the "*" entry matched (an auto-database).
  bool from_fallback = false;

  // Each host with its port (the one port, or the port at the same place in `ports`; a host
  // without one, which validation rejects, gets the last port).
  std::vector<HostAddress> Addresses() const;
  // Where new servers go, how they are chosen and what their login sets: a change closes the
  // pool's servers.
  bool SameTarget(const DatabaseConfig& other) const {
    return hosts == other.hosts && ports == other.ports && dbname == other.dbname &&
           user == other.user && password == other.password &&
           target_session_attrs == other.target_session_attrs &&
           load_balance_hosts == other.load_balance_hosts &&
           server_settings == other.server_settings && connect_query == other.connect_query;
  }
};

struct UserConfig {
  std::string name;
  std::optional<PoolMode> pool_mode;  // overrides the database's and the pool section's mode
  std::optional<SessionState> session_state;  // likewise
  // 0 = unlimited. The loader copies pool.max_user_connections here when the user does not set it.
  int max_user_connections = 0;
  // Clients of this user in the whole pod; 0 = unlimited. Copied from the pool section likewise.
  int max_user_client_connections = 0;
  // PgBouncer's per-user pool_size and reserve_pool_size: over the database's and the pool
  // section's for every pool of this user.
  std::optional<int> pool_size;
  std::optional<int> reserve_pool_size;
  // Per-user timeouts over the pool section's (ClientTimeouts).
  std::optional<absl::Duration> query_timeout;
  std::optional<absl::Duration> query_wait_timeout;
  std::optional<absl::Duration> idle_transaction_timeout;
  std::optional<absl::Duration> transaction_timeout;
  std::optional<absl::Duration> client_idle_timeout;
};

// The timeouts that end a client, as they hold for one user (Config::EffectiveClientTimeouts).
struct ClientTimeouts {
  absl::Duration query_timeout;
  absl::Duration query_wait_timeout;
  absl::Duration idle_transaction_timeout;
  absl::Duration transaction_timeout;
  absl::Duration client_idle_timeout;
};

struct PoolConfig {
  PoolMode pool_mode = PoolMode::kTransaction;
  SessionState session_state = SessionState::kTrack;
  // Servers of one pool that clients may hold for session state at once (per pod); a client
  // that would pin one more gets an ERROR. 0 = half the pool size (at least 1).
  int max_pinned_servers = 0;
  int default_pool_size = 20;
  int min_pool_size = 0;
  int reserve_pool_size = 0;
  absl::Duration reserve_pool_timeout = absl::Seconds(5);
  int max_client_conn = 10000;  // fleet-wide
  int max_db_connections = 0;   // default for databases; 0 = unlimited
  int max_user_connections = 0;
  // Defaults for databases' and users' client limits (pod-wide); 0 = unlimited.
  int max_db_client_connections = 0;
  int max_user_client_connections = 0;
  int max_prepared_statements = 200;
  std::string server_reset_query = "DISCARD ALL";
  bool server_reset_query_always = false;
  std::string server_check_query = "";  // empty query, as PgBouncer 1.25
  absl::Duration server_check_delay = absl::Seconds(30);
  absl::Duration server_lifetime = absl::Seconds(3600);
  absl::Duration server_idle_timeout = absl::Seconds(600);
  absl::Duration server_connect_timeout = absl::Seconds(15);
  absl::Duration server_login_retry = absl::Seconds(15);
  absl::Duration client_idle_timeout = absl::ZeroDuration();  // zero = disabled
  absl::Duration client_login_timeout = absl::Seconds(60);
  absl::Duration query_timeout = absl::ZeroDuration();
  absl::Duration query_wait_timeout = absl::Seconds(120);
  // A client queued this long gets a NOTICE that it waits for a server (PgBouncer's
  // query_wait_notify). Zero: none.
  absl::Duration query_wait_notify = absl::ZeroDuration();
  absl::Duration idle_transaction_timeout = absl::ZeroDuration();
  // PgBouncer 1.25's transaction_timeout: a client whose transaction (or single statement) ran
  // longer is closed, and its server's work cancelled. Zero: off.
  absl::Duration transaction_timeout = absl::ZeroDuration();
  absl::Duration cancel_wait_timeout = absl::Seconds(10);
  // Sent to PostgreSQL at every server login as client_connection_check_interval (PostgreSQL
  // 14+): a backend whose pgfleet connection closed (a worker or a pod killed) stops its query
  // within this instead of running it to the end. A dead worker's servers stay counted in the
  // pod's budget for twice this plus 250 ms, so that siblings open no servers while PostgreSQL
  // still runs the orphaned backends. Zero: not sent, and a dead worker's room returns at once.
  absl::Duration server_connection_check_interval = absl::Milliseconds(500);
  // Sent at every server login as tcp_keepalives_idle, _interval and _count and tcp_user_timeout
  // (PostgreSQL 12+), and set on pgfleet's own end of the socket. When a pod's node vanishes
  // without closing its connections, PostgreSQL ends their backends within idle + interval x
  // count after the last traffic (35 s with these defaults) instead of the kernel's 2 hours and
  // more, and a connection with data unacknowledged within tcp_user_timeout. Zero: not sent, the
  // system's value.
  absl::Duration server_tcp_keepalive_idle = absl::Seconds(20);
  absl::Duration server_tcp_keepalive_interval = absl::Seconds(5);
  int server_tcp_keepalive_count = 3;
  absl::Duration server_tcp_user_timeout = absl::Seconds(35);
  // SIGTERM/SIGINT: how long clients may finish their transactions before they are closed.
  absl::Duration shutdown_timeout = absl::Seconds(30);
  // Beyond the five always tracked (param_sync.h): by default every other parameter PostgreSQL
  // reports (GUC_REPORT) and a client may set, as PgBouncer 1.26 does, so that a client's SET of
  // it follows the client instead of leaking to the next one on the server. search_path is
  // reported from PostgreSQL 18, scram_iterations from 16; where a server does not report one, a
  // SET of it inside a session cannot be seen (only its startup value is applied).
  // default_transaction_read_only is tracked too: a client's own SET must not make a server
  // read-only for others. Judging a host's role reads the login's value, which no client set.
  std::vector<std::string> track_extra_parameters = {
      "IntervalStyle", "search_path", "default_transaction_read_only", "scram_iterations"};
  // Whether the config file names track_extra_parameters: only then does a name that the server
  // does not report get a warning (the defaults name some that older servers never report).
  bool track_extra_parameters_configured = false;
  std::vector<std::string> ignore_startup_parameters;  // e.g. extra_float_digits
  int max_packet_size = 2147483647;
  // Clients of one worker between their startup packet and the end of authentication (password
  // exchange, auth_query); more are refused with 53300. Per worker, not split. 0 = unlimited.
  int max_concurrent_logins = 0;
  // CancelRequests accepted per second from one source address by one worker (a token bucket
  // holding one second's worth); the rest are dropped and counted. 0 = unlimited.
  int cancel_rate_limit = 100;
  int pkt_buf = 4096;
  bool tcp_keepalive = true;
  // PgBouncer's tcp_keepidle, tcp_keepintvl, tcp_keepcnt and tcp_user_timeout for client
  // connections (server ones: server_tcp_keepalive_* above). Zero: the system's value.
  absl::Duration tcp_keepidle = absl::ZeroDuration();
  absl::Duration tcp_keepintvl = absl::ZeroDuration();
  int tcp_keepcnt = 0;
  absl::Duration tcp_user_timeout = absl::ZeroDuration();
  // PgBouncer's server_round_robin: idle servers are taken oldest first (FIFO), spreading load
  // over every server (a round-robin address behind them); off: the most recently used (LIFO).
  bool server_round_robin = false;
  // PgBouncer's server_fast_close: in session pooling, a server marked to close (RECONNECT, a
  // RELOAD that changed its database's target) closes, with its client, between transactions.
  bool server_fast_close = false;
  // PgBouncer's tcp_socket_buffer: SO_SNDBUF and SO_RCVBUF of client and server sockets, in
  // bytes; 0: the system's.
  int tcp_socket_buffer = 0;
  // PgBouncer's dns_max_ttl and dns_nxdomain_ttl: how long a server host name's answer, and a
  // failed lookup, is kept (the DNS record's own TTL is ignored). Zero: looked up at every
  // connect, still off the event loop.
  absl::Duration dns_max_ttl = absl::Seconds(15);
  absl::Duration dns_nxdomain_ttl = absl::Seconds(15);
  // PgBouncer's application_name_add_host: a client's startup application_name gets
  // " - host:port" of its address appended.
  bool application_name_add_host = false;
  // PgBouncer's log_stats and stats_period: every period each worker logs its rates.
  bool log_stats = false;
  absl::Duration stats_period = absl::Seconds(60);
};

struct AuthConfig {
  AuthType type = AuthType::kTrust;
  std::string file;    // PgBouncer userlist.txt format: "user" "password-or-md5-or-scram-secret"
  std::string query;   // auth_query; empty = disabled
  std::string user;    // auth_user: who runs auth_query (password from `file`)
  std::string dbname;  // auth_dbname: database auth_query runs in; empty = the client's database
  // auth_hba_file: pg_hba.conf-format rules (pooler/auth/hba.h); empty = every client may try
  // `type`. When set, the first matching rule's method replaces `type` for that client, and a
  // client no rule matches is refused.
  std::string hba_file;
};

// `tls:`, with PgBouncer's key names. Toward clients pgfleet is the TLS server: allow and prefer
// accept TLS when a client asks, require refuses clients without it, verify-ca and verify-full
// also demand a client certificate signed by client_tls_ca_file. Toward PostgreSQL: prefer and
// allow ask for TLS and fall back to plain text when the server declines, require insists,
// verify-ca checks the server's chain against server_tls_ca_file, verify-full also its host name.
// Files are re-read on reload (SIGHUP), so certificates can be rotated without a restart.
struct TlsConfig {
  SslMode client_tls_sslmode = SslMode::kDisable;
  std::string client_tls_cert_file;
  std::string client_tls_key_file;
  std::string client_tls_ca_file;
  std::string client_tls_protocols = "secure";
  std::string client_tls_ciphers = "default";
  SslMode server_tls_sslmode = SslMode::kDisable;
  std::string server_tls_cert_file;  // client certificate toward PostgreSQL (optional)
  std::string server_tls_key_file;
  std::string server_tls_ca_file;
  std::string server_tls_protocols = "secure";
  std::string server_tls_ciphers = "default";
};

struct AdminConfig {
  std::vector<std::string> users;        // admin_users
  std::vector<std::string> stats_users;  // stats_users
};

struct MetricsConfig {
  std::string listen = "127.0.0.1:9127";
};

struct LogConfig {
  std::string level = "info";  // debug | info | warning | error
  bool log_connections = true;
  bool log_disconnections = true;
  // PgBouncer's logfile: lines also go to this file (reopened on SIGHUP, for log rotation).
  std::string file;
};

// `peering:` (peering/fleet_options.h shows every key): how this pod's workers and other pods
// reach each other to forward cancels.
struct PeeringTlsConfig {
  std::string cert_file;  // this endpoint's certificate (PEM); set = TLS on
  std::string key_file;
  std::string ca_file;  // the CA that signs every peer; clients must present a certificate
  std::string server_name = "pgfleet";  // the name peers' certificates are checked against
  bool enabled() const { return !cert_file.empty(); }
};

struct PeeringConfig {
  std::string runtime_dir;  // empty = /tmp
  std::string listen;       // host:port, empty = no port for other pods
  std::string advertise_address;
  std::string advertise_address_env;
  std::string token_file;
  PeeringTlsConfig tls;
  std::vector<std::string> static_peers;  // host:port each
  std::string discovery_dns;
  absl::Duration discovery_interval = absl::Seconds(10);
  bool forward_cancels = true;  // a test-only switch: false shows what forwarding is for
};

// `controller:`: pgfleet-controller's address (workers) and listen address (the controller), and
// the lease timings.
struct ControllerConfig {
  std::string address;
  std::string listen;
  absl::Duration lease_timeout = absl::Seconds(15);
  absl::Duration renew_interval = absl::Seconds(1);
  absl::Duration forget_after = absl::Minutes(5);
  absl::Duration register_timeout = absl::Seconds(5);
  int min_share = 1;
  // pgfleet-controller's connection to PostgreSQL (a libpq connection string; empty: none), used
  // only to ask which backends of a lost pod PostgreSQL still lists (pg_stat_activity), so that
  // their room is given to others once they are gone (docs/architecture.md, "Connection budget").
  std::string monitor;
  // How long a lost member's room counts beyond what the monitor can check: all of it without a
  // monitor, the room it had no reported backend for with one. Never longer than forget_after
  // (a forgotten member counts nothing).
  absl::Duration lost_room_hold = absl::Seconds(35);
  // With a monitor: end a lost member's backends with pg_terminate_backend (the monitor's role
  // needs pg_signal_backend), so its room comes back at once; the lost pod's clients lose their
  // sessions. Off by default.
  bool terminate_lost_backends = false;
  bool enabled() const { return !address.empty(); }
};

struct Config {
  std::string source_path;  // the file this came from, for error messages and reload
  ListenConfig listen;
  std::string workers = "auto";  // "auto" or a positive number
  // PgBouncer's pidfile: the supervisor's pid, written at start and removed at exit.
  std::string pidfile;
  std::map<std::string, DatabaseConfig> databases;  // keyed by client-facing name
  std::map<std::string, UserConfig> users;
  PoolConfig pool;
  AuthConfig auth;
  TlsConfig tls;
  AdminConfig admin;
  MetricsConfig metrics;
  LogConfig log;
  PeeringConfig peering;
  ControllerConfig controller;
  // Problems that do not stop the load, one line each naming the key: unknown keys under
  // `peering:` ("peering.unix_socket_dir: unknown key, ignored"), so that configs written for
  // older versions still load.
  std::vector<std::string> warnings;

  // The entry for `client_dbname`: an exact match, else "*" with dbname filled in, else null.
  // An empty `dbname` is filled with the entry's name (or `client_dbname` for "*"); a "*" match
  // also gets `name` = `client_dbname` and `from_fallback` = true.
  std::optional<DatabaseConfig> FindDatabase(const std::string& client_dbname) const;
  // Resolved settings for a (database, user) pool: the user's pool_mode wins over the database's,
  // which wins over the pool section (PgBouncer's order); the others are the database's override
  // or the pool section's value. A user without a `users:` entry gets the pool section's limit.
  PoolMode EffectivePoolMode(const DatabaseConfig& db, const std::string& user) const;
  SessionState EffectiveSessionState(const DatabaseConfig& db, const std::string& user) const;
  int EffectiveMaxPinnedServers(const DatabaseConfig& db) const;
  // A database's pool size for SHOW and checks; a pool's own is the user's, if set (PgBouncer).
  int EffectivePoolSize(const DatabaseConfig& db) const;
  int EffectivePoolSize(const DatabaseConfig& db, const std::string& user) const;
  int EffectiveMinPoolSize(const DatabaseConfig& db) const;
  absl::Duration EffectiveServerLifetime(const DatabaseConfig& db) const {
    return db.server_lifetime.value_or(pool.server_lifetime);
  }
  int EffectiveReservePoolSize(const DatabaseConfig& db) const;
  int EffectiveReservePoolSize(const DatabaseConfig& db, const std::string& user) const;
  int EffectiveMaxUserConnections(const std::string& user) const;
  int EffectiveMaxUserClientConnections(const std::string& user) const;
  ClientTimeouts EffectiveClientTimeouts(const std::string& user) const;
  // The auth_query, auth_user and auth_dbname that look up `db`'s clients: the database's own,
  // else the auth section's (query empty: no lookup).
  AuthConfig EffectiveAuth(const DatabaseConfig& db) const;
};

// Loads and validates a YAML config file. Errors are InvalidArgument (NotFound etc. when the file
// cannot be read); each problem is one line naming the file, the key and, when known, the line:
// `/etc/pgfleet.yaml: pool.default_pool_size: expected a non-negative integer, got "abc" (line 4)`.
// Every problem found is reported, not just the first. A relative auth.file or auth.hba_file is
// resolved against the config file's directory.
absl::StatusOr<Config> LoadConfigFile(const std::string& path);
// Same, from text; `source_name` stands in for the file name in errors, becomes `source_path`,
// and its directory (if it has one) anchors a relative auth.file or auth.hba_file.
// Text whose first line opens a section is a pgbouncer.ini (below).
absl::StatusOr<Config> LoadConfigText(const std::string& text, const std::string& source_name);

// A PgBouncer configuration (pgbouncer.ini, with its %include files) loads with PgBouncer's
// meaning: its defaults where they differ from pgfleet's, its [databases] and [users] connection
// strings, and a [pgfleet] section for pgfleet's own settings (`workers = 4`, `peering.listen =
// ...`, dotted YAML paths). A key pgfleet does not implement is an error naming the key and the
// file unless it holds the value under which PgBouncer does nothing different (pgbouncer_ini.cc
// lists them). README, "Coming from PgBouncer", lists them.

// LoadConfigFile with `settings` laid over the file, in order: the console's SET key = value,
// with PgBouncer's key names and meaning. Keys that need a restart (listen_*,
// unix_socket_dir) and pgfleet's own keys are refused, naming the key.
absl::StatusOr<Config> LoadConfigFileWithSettings(
    const std::string& path, const std::vector<std::pair<std::string, std::string>>& settings);

// The configuration in `path` (YAML or pgbouncer.ini) as the YAML pgfleet reads it, after it
// validated: what `pgfleet --print-config` shows. Keys it does not list take pgfleet's defaults.
absl::StatusOr<std::string> ConfigFileAsYaml(const std::string& path);

// The semantic checks LoadConfig* run (ranges, required combinations such as md5 needing
// auth.file or auth.query), for a Config built or edited in code. Errors name `source_path`
// and the key, one problem per line.
[[nodiscard]] absl::Status ValidateConfig(const Config& config);
// Only the checks of the `peering:` and `controller:` sections (part of ValidateConfig), for the
// processes that use them on a Config that may have been built in code.
[[nodiscard]] absl::Status ValidateFleetSections(const Config& config);

// Parses "500ms", "30s", "5m", "1h", "2d", or a bare number of seconds ("0" = zero); a decimal
// fraction ("1.5s") and "us" are accepted too. Junk, negative or overflowing values are
// InvalidArgument with a message that quotes the input, ready to prefix with a key.
absl::StatusOr<absl::Duration> ParseDuration(std::string_view text);

}  // namespace pgfleet::config
