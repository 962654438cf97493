// The one-write-in-flight queue both lease streams write through.
#include "peering/stream_write_queue.h"

#include <string>

#include "gtest/gtest.h"

namespace pgfleet::peering {
namespace {

TEST(StreamWriteQueueTest, FirstPushStartsAWriteLaterOnesWaitTheirTurn) {
  StreamWriteQueue<std::string> queue;
  EXPECT_FALSE(queue.writing());
  const std::string* first = queue.Push("a");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(*first, "a");
  EXPECT_TRUE(queue.writing());
  EXPECT_EQ(queue.Push("b"), nullptr);
  EXPECT_EQ(queue.Push("c"), nullptr);
  const std::string* next = queue.OnWriteDone(true);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(*next, "b");
  next = queue.OnWriteDone(true);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(*next, "c");
  EXPECT_EQ(queue.OnWriteDone(true), nullptr);
  EXPECT_FALSE(queue.writing());
  // Idle again: the next push starts at once.
  const std::string* again = queue.Push("d");
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(*again, "d");
}

TEST(StreamWriteQueueTest, AFailedWriteDropsWhatIsQueued) {
  StreamWriteQueue<std::string> queue;
  ASSERT_NE(queue.Push("a"), nullptr);
  EXPECT_EQ(queue.Push("b"), nullptr);
  EXPECT_EQ(queue.OnWriteDone(false), nullptr);
  EXPECT_FALSE(queue.writing());
  const std::string* fresh = queue.Push("c");
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(*fresh, "c");
}

TEST(StreamWriteQueueTest, PointersStayValidWhileMoreIsQueued) {
  StreamWriteQueue<std::string> queue;
  const std::string* first = queue.Push(std::string(100, 'x'));
  for (int i = 0; i < 1000; ++i) queue.Push(std::to_string(i));
  EXPECT_EQ(*first, std::string(100, 'x'));  // a deque never moves its elements on push_back
  const std::string* second = queue.OnWriteDone(true);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(*second, "0");
}

}  // namespace
}  // namespace pgfleet::peering
