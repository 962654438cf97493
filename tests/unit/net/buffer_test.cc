// Tests for pooler/net/buffer.h: append/consume, compaction, growth, and chunk reuse.
#include "pooler/net/buffer.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/frame.h"

namespace pgfleet::net {
namespace {

constexpr size_t kChunk = Buffer::kChunkSize;

std::string_view View(std::span<const uint8_t> s) {
  return {reinterpret_cast<const char*>(s.data()), s.size()};
}

// Deterministic, position-dependent filler so that a misplaced byte shows up.
std::string Pattern(size_t n, size_t seed = 0) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>((i * 131 + seed * 7) & 0xff);
  return out;
}

TEST(BufferTest, StartsEmptyWithoutStorage) {
  Buffer b;
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_TRUE(b.Readable().empty());
  b.ReleaseIfEmpty();
  EXPECT_EQ(b.capacity(), 0u);
}

TEST(BufferTest, AppendThenConsumeInPieces) {
  Buffer b;
  b.Append("hello, ");
  b.Append("world");
  EXPECT_EQ(b.capacity(), kChunk);
  EXPECT_EQ(View(b.Readable()), "hello, world");
  b.Consume(7);
  EXPECT_EQ(View(b.Readable()), "world");
  EXPECT_EQ(b.size(), 5u);
  b.Consume(5);
  EXPECT_TRUE(b.empty());
  // Fully drained: the next write starts at the front again, with the whole chunk free.
  EXPECT_EQ(b.PrepareWrite().size(), kChunk);
}

TEST(BufferTest, EmptyAppendOnEmptyBufferIsHarmless) {
  Buffer b;
  b.Append(reinterpret_cast<const uint8_t*>(""), 0);
  EXPECT_TRUE(b.empty());
}

TEST(BufferTest, MutableReadableEditsInPlace) {
  Buffer b;
  b.Append("abc");
  b.MutableReadable()[1] = 'X';
  EXPECT_EQ(View(b.Readable()), "aXc");
}

TEST(BufferTest, PrepareWriteAndCommit) {
  Buffer b;
  auto space = b.PrepareWrite(10);
  ASSERT_GE(space.size(), 10u);
  std::memcpy(space.data(), "0123456789", 10);
  b.Commit(4);  // as if read() returned fewer bytes than offered
  EXPECT_EQ(View(b.Readable()), "0123");
  space = b.PrepareWrite(1);
  EXPECT_EQ(space.size(), kChunk - 4);
  space[0] = 'z';
  b.Commit(1);
  EXPECT_EQ(View(b.Readable()), "0123z");
}

TEST(BufferTest, CompactsInsteadOfGrowingWhenFrontIsFree) {
  Buffer b;
  const std::string first = Pattern(kChunk - 10);
  b.Append(first);
  b.Consume(kChunk - 20);  // 10 bytes left at the back of the chunk
  const std::string tail = first.substr(kChunk - 20);
  const std::string more = Pattern(100, 1);
  b.Append(more);
  EXPECT_EQ(b.capacity(), kChunk);
  EXPECT_EQ(View(b.Readable()), tail + more);
  // The readable bytes moved to the front of the chunk.
  EXPECT_EQ(b.PrepareWrite().size(), kChunk - tail.size() - more.size());
}

TEST(BufferTest, GrowsBeyondChunkSizeKeepingContents) {
  Buffer b;
  const std::string big = Pattern(kChunk + 1);
  b.Append(big);
  EXPECT_EQ(b.capacity(), 2 * kChunk);
  EXPECT_EQ(View(b.Readable()), big);

  Buffer huge;
  const std::string five = Pattern(5 * kChunk, 2);
  huge.Append("x");
  huge.Append(five);
  EXPECT_EQ(huge.capacity(), 8 * kChunk);
  EXPECT_EQ(View(huge.Readable()), "x" + five);
}

TEST(BufferTest, GrowsWhenFreeSpaceIsSplitAcrossFrontAndBack) {
  Buffer b;
  b.Append(Pattern(kChunk));
  b.Consume(100);
  // 100 bytes free at the front, none at the back; 200 more do not fit even after compaction.
  const std::string more = Pattern(200, 3);
  b.Append(more);
  EXPECT_EQ(b.capacity(), 2 * kChunk);
  EXPECT_EQ(View(b.Readable()), Pattern(kChunk).substr(100) + more);
}

TEST(BufferTest, ManySmallAppendsAcrossGrowth) {
  Buffer b;
  std::string expected;
  for (int i = 0; i < 5000; ++i) {
    const std::string piece = Pattern(static_cast<size_t>(i % 37) + 1, static_cast<size_t>(i));
    b.Append(piece);
    expected += piece;
    if (i % 7 == 0) {
      const size_t n = std::min<size_t>(b.size(), 13);
      b.Consume(n);
      expected.erase(0, n);
    }
  }
  EXPECT_EQ(View(b.Readable()), expected);
}

TEST(BufferTest, IsAByteSinkForBuilders) {
  Buffer b;
  protocol::BuildQuery(b, "select 1");
  protocol::BuildSync(b);
  protocol::FrameHeader header;
  ASSERT_EQ(protocol::PeekHeader(b.Readable(), 1024, &header), protocol::FrameResult::kMessage);
  EXPECT_EQ(header.type, 'Q');
  b.Consume(header.total_size());
  ASSERT_EQ(protocol::PeekHeader(b.Readable(), 1024, &header), protocol::FrameResult::kMessage);
  EXPECT_EQ(header.type, 'S');
  EXPECT_EQ(b.size(), header.total_size());
}

TEST(BufferTest, ReleaseIfEmptyReturnsStorageOnlyWhenEmpty) {
  Buffer b;
  b.Append("data");
  b.ReleaseIfEmpty();
  EXPECT_EQ(b.capacity(), kChunk);
  EXPECT_EQ(View(b.Readable()), "data");
  b.Consume(4);
  b.ReleaseIfEmpty();
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_TRUE(b.empty());
  // Usable again afterwards.
  b.Append("again");
  EXPECT_EQ(View(b.Readable()), "again");
  EXPECT_EQ(b.capacity(), kChunk);
}

TEST(BufferTest, ReleasedChunkIsReusedByTheNextBuffer) {
  const uint8_t* first = nullptr;
  {
    Buffer a;
    a.Append("a");
    first = a.Readable().data();
    a.Consume(1);
    a.ReleaseIfEmpty();
    Buffer b;
    b.Append("b");
    EXPECT_EQ(b.Readable().data(), first);
  }
  // A destroyed buffer's chunk goes back too.
  Buffer c;
  c.Append("c");
  EXPECT_EQ(c.Readable().data(), first);
}

TEST(BufferTest, ManyBuffersReuseChunks) {
  constexpr int kBuffers = 200;
  std::set<const uint8_t*> first_round;
  {
    std::vector<std::unique_ptr<Buffer>> buffers;
    for (int i = 0; i < kBuffers; ++i) {
      buffers.push_back(std::make_unique<Buffer>());
      buffers.back()->Append(Pattern(64, static_cast<size_t>(i)));
      first_round.insert(buffers.back()->Readable().data());
    }
    EXPECT_EQ(first_round.size(), static_cast<size_t>(kBuffers));
    for (auto& b : buffers) {
      b->Consume(b->size());
      b->ReleaseIfEmpty();
      EXPECT_EQ(b->capacity(), 0u);
    }
  }
  std::vector<std::unique_ptr<Buffer>> again;
  for (int i = 0; i < kBuffers; ++i) {
    again.push_back(std::make_unique<Buffer>());
    again.back()->Append("x");
    EXPECT_TRUE(first_round.count(again.back()->Readable().data()) == 1) << i;
  }
}

TEST(BufferTest, GrowingReturnsTheOldChunkToThePool) {
  Buffer big;
  big.Append("x");
  const uint8_t* chunk = big.Readable().data();
  big.Append(Pattern(kChunk));  // moves to a 2-chunk block
  EXPECT_NE(big.Readable().data(), chunk);
  Buffer next;
  next.Append("y");
  EXPECT_EQ(next.Readable().data(), chunk);
}

TEST(BufferTest, BuffersOnAnotherThreadWork) {
  // Each thread has its own chunk pool; one that ends must not disturb this one.
  std::thread t([] {
    Buffer b;
    b.Append(Pattern(100));
    b.Consume(100);
    b.ReleaseIfEmpty();
    Buffer c;
    c.Append("c");
  });
  t.join();
  Buffer here;
  here.Append("here");
  EXPECT_EQ(View(here.Readable()), "here");
}

}  // namespace
}  // namespace pgfleet::net
