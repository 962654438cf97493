// A fleet for one test: pgfleet-controller and "pods" (pgfleet processes on 127.0.0.2, .3, ...)
// in front of the shared PostgreSQL, client load on them, and a sampler of PostgreSQL's backends
// (controller_test.cc, lost_member_test.cc).
#pragma once

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/harness/controller_process.h"
#include "tests/integration/harness/fixtures.h"

namespace pgfleet::testing {

inline constexpr int kFleetBudget = 12;
inline constexpr char kFleetToken[] = "controller-test-token-6f1d2e";

// How many workers of `pod` have reported ready (each registers with the controller, if any,
// and binds its peering port first).
inline size_t WorkersReady(const PgfleetProcess& pod) {
  return CountInLog(pod.Log(), "event=worker_ready");
}

// Samples PostgreSQL's client backends every `interval` on its own connection: the pods' server
// connections carry application_name "ctlpod<name>" (databases.postgres.application_name).
class BudgetSampler {
 public:
  explicit BudgetSampler(std::chrono::milliseconds interval = std::chrono::milliseconds(50))
      : interval_(interval), thread_([this] { Run(); }) {}
  ~BudgetSampler() { Stop(); }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    stopped_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  int max_total() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_total_;
  }
  int samples() {
    std::lock_guard<std::mutex> lock(mu_);
    return samples_;
  }
  // Starts a new window for Window().
  void Mark() {
    std::lock_guard<std::mutex> lock(mu_);
    window_.clear();
    window_samples_ = 0;
    window_max_total_ = 0;
    window_worst_.clear();
  }
  // The most backends of all pods together in one sample since Mark(), and that sample.
  int window_max_total() {
    std::lock_guard<std::mutex> lock(mu_);
    return window_max_total_;
  }
  std::string window_worst() {
    std::lock_guard<std::mutex> lock(mu_);
    return window_worst_;
  }
  int window_samples() {
    std::lock_guard<std::mutex> lock(mu_);
    return window_samples_;
  }
  // Per pod: {max, mean} over the samples since Mark().
  std::map<std::string, std::pair<int, double>> Window() {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, std::pair<int, double>> out;
    for (const auto& [pod, stat] : window_) {
      out[pod] = {stat.first, window_samples_ == 0 ? 0 : stat.second / window_samples_};
    }
    return out;
  }
  std::string Describe() {
    std::lock_guard<std::mutex> lock(mu_);
    return absl::StrCat("samples=", samples_, " max_total=", max_total_, " worst=", worst_);
  }

 private:
  void Run() {
    auto conn = Connect(PgServer::Shared().ConnString() + " application_name=ctl-sampler");
    while (!stop_) {
      ResultPtr r = Exec(conn,
                         "SELECT application_name, count(*) FROM pg_stat_activity WHERE "
                         "backend_type = 'client backend' AND application_name LIKE 'ctlpod%' "
                         "GROUP BY 1");
      if (PQresultStatus(r.get()) == PGRES_TUPLES_OK) {
        std::map<std::string, int> counts;
        int total = 0;
        for (int i = 0; i < PQntuples(r.get()); ++i) {
          const int n = std::stoi(PQgetvalue(r.get(), i, 1));
          counts[PQgetvalue(r.get(), i, 0)] = n;
          total += n;
        }
        std::lock_guard<std::mutex> lock(mu_);
        ++samples_;
        ++window_samples_;
        if (total > max_total_) {
          max_total_ = total;
          worst_.clear();
          for (const auto& [pod, n] : counts) absl::StrAppend(&worst_, pod, ":", n, " ");
        }
        if (total > window_max_total_) {
          window_max_total_ = total;
          window_worst_.clear();
          for (const auto& [pod, n] : counts) absl::StrAppend(&window_worst_, pod, ":", n, " ");
        }
        for (const auto& [pod, n] : counts) {
          auto& stat = window_[pod];
          stat.first = std::max(stat.first, n);
          stat.second += n;
        }
      }
      std::unique_lock<std::mutex> lock(mu_);
      stopped_.wait_for(lock, interval_, [this] { return stop_.load(); });
    }
  }

  const std::chrono::milliseconds interval_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable stopped_;
  int max_total_ = 0;
  int samples_ = 0;
  int window_samples_ = 0;
  int window_max_total_ = 0;
  std::string worst_;
  std::string window_worst_;
  std::map<std::string, std::pair<int, double>> window_;  // pod -> (max, sum)
  std::thread thread_;
};

// `n` clients on one pod, each running short queries in a loop until stopped.
class Load {
 public:
  Load(const PgfleetProcess& pod, int n, const std::string& sql = "SELECT pg_sleep(0.02)") {
    const std::string conninfo = pod.ConnString();
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, conninfo, sql] {
        ConnPtr conn;
        while (!stop_) {
          if (!Ok(conn)) {
            conn = Connect(conninfo);
            if (!Ok(conn)) {
              NoteError(ErrorOf(conn));
              std::unique_lock<std::mutex> lock(mu_);
              stopped_.wait_for(lock, std::chrono::milliseconds(100),
                                [this] { return stop_.load(); });
              continue;
            }
          }
          if (ResultOk(Exec(conn, sql))) {
            ++ok_;
          } else {
            NoteError(ErrorOf(conn));
            conn.reset();
          }
        }
      });
    }
  }
  ~Load() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    stopped_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  int ok() const { return ok_; }
  int errors() const { return errors_; }
  std::string first_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return first_error_;
  }

 private:
  void NoteError(const std::string& error) {
    if (stop_) return;
    ++errors_;
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.empty()) first_error_ = error;
  }

  std::atomic<bool> stop_{false};
  std::atomic<int> ok_{0};
  std::atomic<int> errors_{0};
  std::mutex mu_;
  std::condition_variable stopped_;
  std::string first_error_;
  std::vector<std::thread> threads_;
};

class ControllerFixture : public IntegrationTest {
 protected:
  void SetUp() override {
    IntegrationTest::SetUp();
    char tmpl[] = "/tmp/pgfleet-ctltest-XXXXXX";
    dir_ = mkdtemp(tmpl);
    token_file_ = dir_ + "/peering-token";
    std::ofstream(token_file_) << kFleetToken << "\n";
  }
  void TearDown() override { RunCommand("rm -rf " + dir_); }

  // The controller: budget 12 for "postgres", short leases so the tests stay short.
  // `controller_keys`: more lines for its `controller:` mapping (monitor, lost_room_hold).
  std::unique_ptr<ControllerProcess> StartController(bool budget = true,
                                                     const std::string& controller_keys = "") {
    return std::make_unique<ControllerProcess>(
        absl::StrCat("databases:\n  postgres: {host: 127.0.0.1, port: ", pg().port(),
                     budget ? absl::StrCat(", max_db_connections: ", budget_) : "", "}\npeering:\n",
                     PeeringAuth()),
        absl::StrCat("  lease_timeout: 1500ms\n  renew_interval: 100ms\n  forget_after: 30s\n",
                     controller_keys));
  }

  // A pod on `address` ("127.0.0.2"): its server connections are named ctlpod<name>, its
  // peering port is its own, and it leases its share from `controller`.
  std::unique_ptr<PgfleetProcess> StartPod(const std::string& name, const std::string& address,
                                           const ControllerProcess& controller, int workers = 1,
                                           bool budget = true, int pool_size = 100) {
    const int peering_port = FreePort();
    auto pod = std::make_unique<PgfleetProcess>(
        absl::StrCat(
            "workers: ", workers, "\ndatabases:\n  postgres: {host: 127.0.0.1, port: ", pg().port(),
            budget ? absl::StrCat(", max_db_connections: ", budget_) : "",
            ", application_name: ctlpod", name,
            "}\npool:\n  pool_mode: transaction\n  default_pool_size: ", pool_size,
            "\n  shutdown_timeout: 2s\n  query_wait_timeout: 60s\n  cancel_rate_limit: 1000\n",
            "peering:\n  listen: ", address, ":", peering_port, "\n", PeeringAuth(),
            "\ncontroller:\n  address: ", controller.address(), "\n  register_timeout: 3s\n"),
        "", "", address);
    peering_ports_[name] = peering_port;
    // The client port accepts as soon as the supervisor binds it; wait for the workers, which
    // register with the controller and bind the peering port first.
    WaitFor([&] { return WorkersReady(*pod) >= static_cast<size_t>(workers); },
            std::chrono::seconds(5));
    return pod;
  }

  // The `peering:` keys that authenticate pods and the controller: the token, or with
  // UseTls(), certificates (mTLS) instead.
  // Two pods without a controller, on 127.0.0.2 and 127.0.0.3, each the other's static peer,
  // with `workers` workers and the `pool` section's keys (a YAML flow mapping's inside).
  std::pair<std::unique_ptr<PgfleetProcess>, std::unique_ptr<PgfleetProcess>> StaticPeerPods(
      int workers, const std::string& pool) {
    const int port_a = FreePort();
    const int port_b = FreePort();
    auto pod = [&](const std::string& address, int port, const std::string& peer) {
      return std::make_unique<PgfleetProcess>(
          absl::StrCat("workers: ", workers, "\ndatabases:\n  postgres: {host: 127.0.0.1, port: ",
                       pg().port(), "}\npool: {", pool, "}\npeering:\n  listen: ", address, ":",
                       port, "\n", PeeringAuth(), "  static_peers: [", peer, "]\n"),
          "", "", address);
    };
    return {pod("127.0.0.2", port_a, absl::StrCat("127.0.0.3:", port_b)),
            pod("127.0.0.3", port_b, absl::StrCat("127.0.0.2:", port_a))};
  }
  std::string PeeringAuth() const {
    if (!tls_) return absl::StrCat("  token_file: ", token_file_, "\n");
    return absl::StrCat("  tls: {cert_file: ", dir_, "/tls.crt, key_file: ", dir_,
                        "/tls.key, ca_file: ", dir_, "/ca.crt}\n");
  }
  // One certificate for every pod and the controller (as a Kubernetes Secret would hold),
  // named "pgfleet", signed by a CA made for this test.
  void UseTls() {
    std::ofstream(dir_ + "/mkcert.sh")
        << "set -e\ncd " << dir_ << "\n"
        << "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 "
           "-subj /CN=pgfleet-test-ca\n"
        << "openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr -subj /CN=pgfleet\n"
        << "printf 'subjectAltName=DNS:pgfleet\\nextendedKeyUsage=serverAuth,clientAuth\\n' "
           "> ext.cnf\n"
        << "openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt "
           "-days 1 -extfile ext.cnf\n";
    ASSERT_EQ(RunCommand("bash " + dir_ + "/mkcert.sh >" + dir_ + "/mkcert.log 2>&1"), 0)
        << RunCommandOutput("cat " + dir_ + "/mkcert.log");
    tls_ = true;
  }

  std::string dir_;
  std::string token_file_;
  bool tls_ = false;
  // max_db_connections of the controller and the pods started after it is set.
  int budget_ = kFleetBudget;
  std::map<std::string, int> peering_ports_;
};

}  // namespace pgfleet::testing
