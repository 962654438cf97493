#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/metrics/exporter.h"

namespace pgfleet::metrics {
namespace {

using ::testing::HasSubstr;

peering::v1::WorkerStats Snapshot(bool ready, absl::Time at, uint32_t idle_servers) {
  peering::v1::WorkerStats s;
  s.set_ready(ready);
  s.set_snapshot_time_ms(absl::ToUnixMillis(at));
  auto* p = s.add_pools();
  p->set_server_idle(idle_servers);
  return s;
}

const auto kUnreachable = [] { return false; };
const auto kReachable = [] { return true; };

TEST(ReadinessTest, ReadyWhenEveryWorkerIsReadyAndHoldsAServer) {
  const absl::Time now = absl::Now();
  std::map<int, peering::v1::WorkerStats> latest = {{0, Snapshot(true, now, 1)},
                                                    {1, Snapshot(true, now, 0)}};
  EXPECT_TRUE(EvaluateReadiness(2, latest, now, kUnreachable).ready);
}

TEST(ReadinessTest, WithoutServersThePostgresProbeDecides) {
  const absl::Time now = absl::Now();
  std::map<int, peering::v1::WorkerStats> latest = {{0, Snapshot(true, now, 0)}};
  EXPECT_TRUE(EvaluateReadiness(1, latest, now, kReachable).ready);
  Readiness r = EvaluateReadiness(1, latest, now, kUnreachable);
  EXPECT_FALSE(r.ready);
  EXPECT_THAT(r.reason, HasSubstr("PostgreSQL is not reachable"));
}

TEST(ReadinessTest, AMissingNotReadyOrHungWorkerIsNotReady) {
  const absl::Time now = absl::Now();
  std::map<int, peering::v1::WorkerStats> latest = {{0, Snapshot(true, now, 1)}};
  EXPECT_THAT(EvaluateReadiness(2, latest, now, kReachable).reason,
              HasSubstr("worker 1 has not reported"));
  latest[1] = Snapshot(false, now, 1);
  EXPECT_THAT(EvaluateReadiness(2, latest, now, kReachable).reason,
              HasSubstr("worker 1 is not accepting"));
  latest[1] = Snapshot(true, now - absl::Seconds(30), 1);
  EXPECT_THAT(EvaluateReadiness(2, latest, now, kReachable).reason,
              HasSubstr("worker 1 stopped reporting"));
}

}  // namespace
}  // namespace pgfleet::metrics
