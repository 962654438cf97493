// A cancel of a query that waits for a server: what the client is answered and what is dropped.
#include "pooler/cancel/queued_cancel.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/unit/relay/relay_test_link.h"

namespace pgfleet::pool::relay_testing {
namespace {

std::string Cancelled() {
  return Build([](StringSink& s) {
    protocol::BuildErrorResponse(s, "ERROR", protocol::sqlstate::kQueryCanceled,
                                 "canceling statement due to user request");
  });
}
std::string Batch(std::string_view sql) { return Parse("", sql) + Bind("") + Execute() + Sync(); }

// A client's queue as its input buffer holds it: cancelled at the front, dropped as it arrives.
class Queue {
 public:
  Queue() : stream_(1u << 30, 0) {}
  // The cancel arrives with `queued` waiting; returns whether a query was cancelled.
  bool Cancel(std::string_view queued) {
    pending_ += queued;
    StringSink answer;
    const QueuedCancelVerdict verdict = CancelQueuedQuery(stream_, AsBytes(pending_), 'I', answer);
    protocol_error_ = verdict.protocol_error;
    EXPECT_TRUE(verdict.cancelled || answer.bytes().empty());
    EXPECT_TRUE(verdict.cancelled || verdict.consumed == 0);
    answered_ += answer.bytes();
    pending_.erase(0, verdict.consumed);
    return verdict.cancelled;
  }
  // More bytes arrive; the rest of a cancelled query is dropped.
  void Arrive(std::string_view bytes) {
    pending_ += bytes;
    StringSink answer;
    const CancelledRestVerdict verdict = DropCancelledRest(stream_, AsBytes(pending_), 'I', answer);
    protocol_error_ = verdict.protocol_error;
    answered_ += answer.bytes();
    pending_.erase(0, verdict.consumed);
  }
  // What is still queued for a server.
  const std::string& queued() const { return pending_; }
  std::string TakeAnswered() { return std::exchange(answered_, {}); }
  bool dropping() const { return stream_.cancelled_rest != CancelledRest::kNone; }
  bool protocol_error() const { return protocol_error_; }

 private:
  ClientStream stream_;
  std::string pending_;
  std::string answered_;
  bool protocol_error_ = false;
};

TEST(QueuedCancelTest, SimpleQueryIsAnsweredAsCancelledAndTheNextStaysQueued) {
  Queue queue;
  ASSERT_TRUE(queue.Cancel(Query("insert into t values (1)") + Query("select 2")));
  EXPECT_EQ(queue.TakeAnswered(), Cancelled() + Ready('I'));
  EXPECT_EQ(queue.queued(), Query("select 2"));
  EXPECT_FALSE(queue.dropping());
}

TEST(QueuedCancelTest, ExtendedBatchIsDroppedThroughItsSyncAndThePipelineGoesOn) {
  Queue queue;
  ASSERT_TRUE(queue.Cancel(Batch("insert into t values (1)") + Batch("select 2")));
  EXPECT_EQ(queue.TakeAnswered(), Cancelled() + Ready('I'));
  EXPECT_EQ(queue.queued(), Batch("select 2"));
}

TEST(QueuedCancelTest, FunctionCallIsAnsweredLikeASimpleQuery) {
  Queue queue;
  ASSERT_TRUE(queue.Cancel(Typed('F', std::string(10, '\0'))));
  EXPECT_EQ(queue.TakeAnswered(), Cancelled() + Ready('I'));
  EXPECT_EQ(queue.queued(), "");
}

TEST(QueuedCancelTest, BatchWhoseSyncHasNotArrivedIsDroppedUpToIt) {
  Queue queue;
  // PostgreSQL errors at once and skips to the Sync; the ReadyForQuery comes with the Sync.
  ASSERT_TRUE(queue.Cancel(Parse("", "select pg_sleep(9)") + Bind("")));
  EXPECT_EQ(queue.TakeAnswered(), Cancelled());
  EXPECT_EQ(queue.queued(), "");
  EXPECT_TRUE(queue.dropping());
  queue.Arrive(Execute());
  EXPECT_EQ(queue.TakeAnswered(), "");
  EXPECT_TRUE(queue.dropping());
  // Its late Sync ends it; what follows is the client's next query, never the cancelled one's.
  queue.Arrive(Sync() + Query("select 3"));
  EXPECT_EQ(queue.TakeAnswered(), Ready('I'));
  EXPECT_FALSE(queue.dropping());
  EXPECT_EQ(queue.queued(), Query("select 3"));
}

TEST(QueuedCancelTest, QueryCutShortIsDroppedAsItsRestArrivesEvenByteByByte) {
  const std::string query = Query(std::string(100, 'x'));
  Queue queue;
  ASSERT_TRUE(queue.Cancel(query.substr(0, 10)));
  EXPECT_EQ(queue.TakeAnswered(), Cancelled());
  EXPECT_EQ(queue.queued(), "");
  const std::string rest = query.substr(10) + Query("select 4");
  for (char c : rest) queue.Arrive(std::string(1, c));
  EXPECT_EQ(queue.TakeAnswered(), Ready('I'));
  EXPECT_EQ(queue.queued(), Query("select 4"));
}

TEST(QueuedCancelTest, NothingIsCancelledWithoutAQueryAtTheFront) {
  for (const std::string& queued :
       {std::string(), Query("select 1").substr(0, 3), Sync() + Query("select 1"), Terminate(),
        CopyData("x") + Query("select 1"), Typed('?', "")}) {
    Queue queue;
    EXPECT_FALSE(queue.Cancel(queued)) << queued.size();
    EXPECT_EQ(queue.TakeAnswered(), "");
    EXPECT_EQ(queue.queued(), queued);
  }
}

TEST(QueuedCancelTest, ASecondCancelWhileTheFirstIsDroppedDoesNothing) {
  Queue queue;
  ASSERT_TRUE(queue.Cancel(Parse("", "select 1")));
  queue.TakeAnswered();
  EXPECT_FALSE(queue.Cancel(""));
  EXPECT_EQ(queue.TakeAnswered(), "");
  queue.Arrive(Sync());
  EXPECT_EQ(queue.TakeAnswered(), Ready('I'));
}

TEST(QueuedCancelTest, ABadLengthWhileDroppingIsAProtocolError) {
  Queue queue;
  ASSERT_TRUE(queue.Cancel(Parse("", "select 1")));
  queue.Arrive(std::string("S") + I32(100));
  EXPECT_TRUE(queue.protocol_error());
}

}  // namespace
}  // namespace pgfleet::pool::relay_testing
