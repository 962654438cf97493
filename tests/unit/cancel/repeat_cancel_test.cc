// Tests for pooler/cancel/repeat_cancel.h: abandoned work that keeps making progress under cancels
// is cancelled again after the first wait each time; work that survives cancels waits twice as
// long each time, up to the longest wait.
#include "pooler/cancel/repeat_cancel.h"

#include "gtest/gtest.h"

namespace pgfleet::pool {
namespace repeat_cancel_test {

const absl::Time kStart = absl::FromUnixSeconds(1000);

TEST(RepeatCancelTest, BeforeAnyCancelTheFirstWaitApplies) {
  // The abandonment's own cancel could not start (a connect that failed at once).
  RepeatCancel repeat(kStart);
  EXPECT_FALSE(repeat.Due(kStart + absl::Milliseconds(249), 1));
  EXPECT_TRUE(repeat.Due(kStart + absl::Milliseconds(250), 1));
}

TEST(RepeatCancelTest, APipelineThatMovesOnIsCancelledAgainAfterTheFirstWaitEachTime) {
  RepeatCancel repeat(kStart);
  repeat.Sent(3);  // the abandonment's cancel, three batches owed
  absl::Time ended = kStart;
  for (size_t owed = 2; owed >= 1; --owed) {
    repeat.Ended(ended);
    // The cancel stopped a query and the next started: one batch fewer owed.
    EXPECT_FALSE(repeat.Due(ended + absl::Milliseconds(249), owed));
    EXPECT_TRUE(repeat.Due(ended + absl::Milliseconds(250), owed)) << owed;
    repeat.Sent(owed);
    EXPECT_EQ(repeat.wait_without_progress(), RepeatCancel::kFirstWait);
    ended += absl::Milliseconds(300);
  }
}

TEST(RepeatCancelTest, WorkThatSurvivesCancelsWaitsTwiceAsLongEachTimeUpToTheLongest) {
  RepeatCancel repeat(kStart);
  repeat.Sent(1);
  repeat.Ended(kStart);
  absl::Time ended = kStart;
  absl::Duration expected = RepeatCancel::kFirstWait;
  int cancels = 1;
  // Fifteen seconds (server_connect_timeout's default) of work that catches every cancel.
  for (absl::Time now = kStart; now < kStart + absl::Seconds(15); now += absl::Milliseconds(100)) {
    if (!repeat.Due(now, 1)) continue;
    EXPECT_GE(now - ended, expected);
    EXPECT_LT(now - ended, expected + absl::Milliseconds(100));
    repeat.Sent(1);
    repeat.Ended(now);  // PostgreSQL takes a cancel within milliseconds
    ++cancels;
    ended = now;
    expected = std::min(2 * expected, RepeatCancel::kLongestWait);
    EXPECT_EQ(repeat.wait_without_progress(), expected);
  }
  // At about 0, 0.3, 0.8, 1.8, 3.8, 7.8 and 11.8 s: seven, where a fixed wait sent one every 0.3 s.
  EXPECT_EQ(cancels, 7);
}

TEST(RepeatCancelTest, ProgressAfterSlowCancelsBringsTheFirstWaitBack) {
  RepeatCancel repeat(kStart);
  repeat.Sent(2);
  repeat.Sent(2);
  repeat.Sent(2);
  repeat.Ended(kStart);
  EXPECT_EQ(repeat.wait_without_progress(), absl::Seconds(1));
  // The stubborn query finally ended and the next batch runs: due after the first wait again.
  EXPECT_TRUE(repeat.Due(kStart + RepeatCancel::kFirstWait, 1));
  repeat.Sent(1);
  EXPECT_EQ(repeat.wait_without_progress(), RepeatCancel::kFirstWait);
}

}  // namespace repeat_cancel_test
}  // namespace pgfleet::pool
