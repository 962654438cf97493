// Server host names resolved off the event loop and kept for dns_max_ttl (net::Resolver).
#include "pooler/net/resolver.h"

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "pooler/net/socket.h"

namespace pgfleet::net {
namespace resolver_test {

using State = Resolver::State;

class ResolverTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(loop_.Init().ok()); }

  // The lookup the resolver's thread runs: `answer_` for any name but "bad".
  absl::StatusOr<Resolver::Addresses> Lookup(const std::string& host, int port) {
    ++lookups_;
    if (host == "bad") {
      return absl::UnavailableError("cannot resolve bad: Name or service not known");
    }
    if (host == "two") {
      return Resolver::Addresses{*ResolveNow("10.0.0.7", port), *ResolveNow("10.0.0.8", port)};
    }
    std::lock_guard<std::mutex> lock(mu_);
    return Resolver::Addresses{*ResolveNow(answer_, port)};
  }
  void SetAnswer(const std::string& address) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = address;
  }
  // Runs the loop until the resolver reports an answer (bounded).
  void RunUntilAnswered() {
    const int before = answers_;
    stop_on_answer_ = true;
    const EventLoop::TimerId guard = loop_.RunAfter(absl::Seconds(10), [&] { loop_.Stop(); });
    ASSERT_TRUE(loop_.Run().ok());
    loop_.CancelTimer(guard);
    ASSERT_GT(answers_, before) << "no answer within 10 s";
  }

  EventLoop loop_;
  std::mutex mu_;
  std::string answer_ = "10.0.0.1";
  std::atomic<int> lookups_{0};
  int answers_ = 0;
  bool stop_on_answer_ = false;
  std::vector<std::string> changed_;
  Resolver resolver_{loop_, [this](const std::string& h, int p) { return Lookup(h, p); }};

  void Wire() {
    resolver_.set_callbacks(
        [this] {
          ++answers_;
          if (stop_on_answer_) loop_.Stop();
        },
        [this](const std::string& host, int port) {
          changed_.push_back(host + ":" + std::to_string(port));
        });
  }
};

TEST_F(ResolverTest, ANameIsLookedUpOnceOffTheLoopAndKeptForItsTtl) {
  Wire();
  const Resolver::Ttls keep{.answer = absl::Seconds(60), .failure = absl::Seconds(60)};
  EXPECT_EQ(resolver_.Resolve("db", 5432, keep).state, State::kPending);
  EXPECT_EQ(resolver_.Resolve("db", 5432, keep).state, State::kPending);  // the same lookup
  RunUntilAnswered();
  const Resolver::Answer answer = resolver_.Resolve("db", 5432, keep);
  ASSERT_EQ(answer.state, State::kReady);
  EXPECT_EQ(AddressText(answer.address), "10.0.0.1:5432");
  EXPECT_EQ(lookups_.load(), 1);
  EXPECT_TRUE(changed_.empty());

  // Numbers and unix sockets need no lookup.
  EXPECT_EQ(resolver_.Resolve("127.0.0.1", 6432, keep).state, State::kReady);
  EXPECT_EQ(resolver_.Resolve("::1", 6432, keep).state, State::kReady);
  const Resolver::Answer unix_socket = resolver_.Resolve("/run/postgresql", 5432, keep);
  ASSERT_EQ(unix_socket.state, State::kReady);
  EXPECT_EQ(AddressText(unix_socket.address), "/run/postgresql/.s.PGSQL.5432");
  EXPECT_EQ(lookups_.load(), 1);
}

TEST_F(ResolverTest, AnExpiredAnswerIsLookedUpAgainAndAChangeIsReported) {
  Wire();
  const Resolver::Ttls none{.answer = absl::ZeroDuration(), .failure = absl::ZeroDuration()};
  const Resolver::Ttls keep{.answer = absl::Seconds(60), .failure = absl::Seconds(60)};
  EXPECT_EQ(resolver_.Resolve("db", 5432, none).state, State::kPending);
  RunUntilAnswered();
  SetAnswer("10.0.0.2");
  // dns_max_ttl 0: every connect looks the name up (off the loop all the same).
  EXPECT_EQ(resolver_.Resolve("db", 5432, none).state, State::kPending);
  RunUntilAnswered();
  EXPECT_EQ(lookups_.load(), 2);
  EXPECT_EQ(changed_, std::vector<std::string>{"db:5432"});
  const Resolver::Answer answer = resolver_.Resolve("db", 5432, keep);
  ASSERT_EQ(answer.state, State::kReady);
  EXPECT_EQ(AddressText(answer.address), "10.0.0.2:5432");
}

// PgBouncer: a name with several addresses has them used in turn.
TEST_F(ResolverTest, SeveralAddressesAreUsedInTurn) {
  Wire();
  const Resolver::Ttls keep{.answer = absl::Seconds(60), .failure = absl::Seconds(60)};
  EXPECT_EQ(resolver_.Resolve("two", 5432, keep).state, State::kPending);
  RunUntilAnswered();
  std::vector<std::string> seen;
  for (int i = 0; i < 4; ++i) {
    seen.push_back(AddressText(resolver_.Resolve("two", 5432, keep).address));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"10.0.0.7:5432", "10.0.0.8:5432", "10.0.0.7:5432",
                                            "10.0.0.8:5432"}));
}

TEST_F(ResolverTest, AFailedLookupIsKeptForTheFailureTtl) {
  Wire();
  const Resolver::Ttls keep{.answer = absl::Seconds(60), .failure = absl::Seconds(60)};
  EXPECT_EQ(resolver_.Resolve("bad", 5432, keep).state, State::kPending);
  RunUntilAnswered();
  const Resolver::Answer answer = resolver_.Resolve("bad", 5432, keep);
  EXPECT_EQ(answer.state, State::kFailed);
  EXPECT_EQ(answer.error, "cannot resolve bad: Name or service not known");
  EXPECT_EQ(resolver_.Resolve("bad", 5432, keep).state, State::kFailed);
  EXPECT_EQ(lookups_.load(), 1);
}

}  // namespace resolver_test
}  // namespace pgfleet::net
