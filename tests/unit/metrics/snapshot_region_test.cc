#include "pooler/metrics/snapshot_region.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace pgfleet::metrics {
namespace {

TEST(SnapshotRegionTest, EmptySlotReadsNothing) {
  auto region = SnapshotRegion::Create(4);
  ASSERT_TRUE(region.ok()) << region.status();
  std::string out;
  EXPECT_FALSE((*region)->Read(0, &out));
  EXPECT_FALSE((*region)->Read(4, &out));  // no such slot
}

TEST(SnapshotRegionTest, ReadReturnsTheLatestPublish) {
  auto region = *SnapshotRegion::Create(2);
  ASSERT_TRUE(region->Publish(1, "first"));
  ASSERT_TRUE(region->Publish(1, "second, longer"));
  ASSERT_TRUE(region->Publish(1, "third"));
  std::string out;
  ASSERT_TRUE(region->Read(1, &out));
  EXPECT_EQ(out, "third");
  EXPECT_FALSE(region->Read(0, &out));
}

TEST(SnapshotRegionTest, ClearEmptiesASlot) {
  auto region = *SnapshotRegion::Create(1);
  ASSERT_TRUE(region->Publish(0, "x"));
  region->Clear(0);
  std::string out;
  EXPECT_FALSE(region->Read(0, &out));
}

TEST(SnapshotRegionTest, RefusesWhatDoesNotFit) {
  auto region = *SnapshotRegion::Create(1);
  EXPECT_FALSE(region->Publish(0, std::string(SnapshotRegion::capacity() + 1, 'a')));
  EXPECT_TRUE(region->Publish(0, std::string(SnapshotRegion::capacity(), 'a')));
  EXPECT_FALSE(region->Publish(1, "no such slot"));
}

TEST(SnapshotRegionTest, AnotherMappingOfTheFdSeesPublishes) {
  auto writer = *SnapshotRegion::Create(3);
  auto reader = SnapshotRegion::Attach(dup(writer->fd()));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->slots(), 3u);
  ASSERT_TRUE(writer->Publish(2, "hello"));
  std::string out;
  ASSERT_TRUE((*reader)->Read(2, &out));
  EXPECT_EQ(out, "hello");
}

TEST(SnapshotRegionTest, AttachRejectsOtherFiles) {
  int fd = memfd_create("not-a-region", 0);
  ASSERT_EQ(ftruncate(fd, 8192), 0);
  EXPECT_FALSE(SnapshotRegion::Attach(fd).ok());
}

TEST(SnapshotRegionTest, ReaderNeverSeesATornSnapshot) {
  auto region = *SnapshotRegion::Create(1);
  ASSERT_TRUE(region->Publish(0, "z"));
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) {
      // Each snapshot is one repeated letter; a torn read would mix two.
      (void)region->Publish(0, std::string(1000 + (i % 7) * 3000, static_cast<char>('a' + i % 26)));
    }
  });
  int reads = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  for (int i = 0; std::chrono::steady_clock::now() < deadline; ++i) {
    std::string out;
    if (!region->Read(0, &out)) continue;
    ++reads;
    ASSERT_FALSE(out.empty());
    ASSERT_EQ(out.find_first_not_of(out[0]), std::string::npos) << "torn at read " << i;
  }
  stop = true;
  writer.join();
  EXPECT_GT(reads, 0);
}

}  // namespace
}  // namespace pgfleet::metrics
