// Shared stats snapshots: memfd layout and the sequence lock.
#include "pooler/metrics/snapshot_region.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pooler/base/strings.h"

namespace pgfleet::metrics {
namespace {

constexpr uint64_t kMagic = 0x7067666c6d657472;  // "pgflmetr"
// A reader retries this often while a writer is mid-publish (a publish is a memcpy of a few KiB).
constexpr int kReadAttempts = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<SnapshotRegion>> SnapshotRegion::Create(uint32_t slots) {
  if (slots == 0) return absl::InvalidArgumentError("snapshot region needs at least one slot");
  int fd = memfd_create("pgfleet-metrics", 0);  // no CLOEXEC: workers inherit it
  if (fd < 0) return absl::InternalError(base::StrCat("memfd_create: ", strerror(errno)));
  const size_t length = kHeaderBytes + size_t{slots} * kSlotBytes;
  if (ftruncate(fd, static_cast<off_t>(length)) != 0) {
    close(fd);
    return absl::InternalError(base::StrCat("ftruncate: ", strerror(errno)));
  }
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    close(fd);
    return absl::InternalError(base::StrCat("mmap: ", strerror(errno)));
  }
  auto* header = static_cast<Header*>(base);
  header->slots = slots;
  header->slot_bytes = static_cast<uint32_t>(kSlotBytes);
  header->magic = kMagic;
  return std::unique_ptr<SnapshotRegion>(new SnapshotRegion(fd, base, length, slots));
}

absl::StatusOr<std::unique_ptr<SnapshotRegion>> SnapshotRegion::Attach(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < kHeaderBytes) {
    return absl::InvalidArgumentError("metrics region fd is not a snapshot region");
  }
  const size_t length = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return absl::InternalError(base::StrCat("mmap: ", strerror(errno)));
  const auto* header = static_cast<const Header*>(base);
  if (header->magic != kMagic || header->slot_bytes != kSlotBytes ||
      kHeaderBytes + size_t{header->slots} * kSlotBytes > length) {
    munmap(base, length);
    return absl::InvalidArgumentError("metrics region has an unexpected layout");
  }
  return std::unique_ptr<SnapshotRegion>(new SnapshotRegion(fd, base, length, header->slots));
}

SnapshotRegion::~SnapshotRegion() {
  munmap(base_, length_);
  close(fd_);
}

SnapshotRegion::SlotHeader* SnapshotRegion::slot_header(uint32_t slot) const {
  return reinterpret_cast<SlotHeader*>(base_ + kHeaderBytes + size_t{slot} * kSlotBytes);
}

uint8_t* SnapshotRegion::slot_data(uint32_t slot) const {
  return base_ + kHeaderBytes + size_t{slot} * kSlotBytes + kSlotHeaderBytes;
}

bool SnapshotRegion::Publish(uint32_t slot, std::string_view bytes) {
  if (slot >= slots_ || bytes.size() > capacity()) return false;
  SlotHeader* h = slot_header(slot);
  const uint64_t seq = h->sequence.load(std::memory_order_relaxed);
  h->sequence.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(slot_data(slot), bytes.data(), bytes.size());
  h->size.store(bytes.size(), std::memory_order_relaxed);
  h->sequence.store(seq + 2, std::memory_order_release);
  return true;
}

bool SnapshotRegion::Read(uint32_t slot, std::string* out) const {
  if (slot >= slots_) return false;
  const SlotHeader* h = slot_header(slot);
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    const uint64_t before = h->sequence.load(std::memory_order_acquire);
    if (before & 1) {
      usleep(50);
      continue;
    }
    const uint64_t size = h->size.load(std::memory_order_relaxed);
    if (size == 0 || size > capacity()) return false;
    out->resize(size);
    std::memcpy(out->data(), slot_data(slot), size);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h->sequence.load(std::memory_order_relaxed) == before) return true;
  }
  return false;
}

void SnapshotRegion::Clear(uint32_t slot) {
  if (slot >= slots_) return;
  SlotHeader* h = slot_header(slot);
  const uint64_t seq = h->sequence.load(std::memory_order_relaxed);
  h->sequence.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  h->size.store(0, std::memory_order_relaxed);
  h->sequence.store(seq + 2, std::memory_order_release);
}

}  // namespace pgfleet::metrics
