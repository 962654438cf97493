// Shared memory through which workers publish their stats to the supervisor: one slot per worker
// process, each holding the latest serialized WorkerStats behind a sequence lock. The supervisor
// creates the region (a memfd) before forking, so no process ever polls another: a worker
// rewrites its slot every publish interval, and the supervisor copies slots when scraped. Same
// pattern as budget/client_budget.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pgfleet::metrics {

class SnapshotRegion {
 public:
  // Room for one snapshot. Pages never written are never allocated (memfd), so the size of the
  // mapping costs address space only. A snapshot larger than this is refused by Publish().
  static constexpr size_t kSlotBytes = size_t{1} << 20;

  // Creates a region with `slots` slots (supervisor, before forking); its fd is inheritable.
  static absl::StatusOr<std::unique_ptr<SnapshotRegion>> Create(uint32_t slots);
  // Maps the region behind an inherited fd (worker).
  static absl::StatusOr<std::unique_ptr<SnapshotRegion>> Attach(int fd);
  ~SnapshotRegion();
  SnapshotRegion(const SnapshotRegion&) = delete;
  SnapshotRegion& operator=(const SnapshotRegion&) = delete;

  int fd() const { return fd_; }
  uint32_t slots() const { return slots_; }
  static constexpr size_t capacity() { return kSlotBytes - kSlotHeaderBytes; }

  // Replaces slot `slot`'s snapshot (one writer per slot). False when it does not fit or the
  // slot does not exist.
  [[nodiscard]] bool Publish(uint32_t slot, std::string_view bytes);
  // Copies slot `slot`'s latest complete snapshot into `out`. False when the slot is empty or a
  // writer kept rewriting it during every attempt. Any thread or process.
  [[nodiscard]] bool Read(uint32_t slot, std::string* out) const;
  // Empties a slot before it is handed to a new process (supervisor).
  void Clear(uint32_t slot);

 private:
  static constexpr size_t kHeaderBytes = 4096;
  static constexpr size_t kSlotHeaderBytes = 64;
  struct Header {
    uint64_t magic;
    uint32_t slots;
    uint32_t slot_bytes;
  };
  struct SlotHeader {
    std::atomic<uint64_t> sequence;  // odd while a write is in progress
    std::atomic<uint64_t> size;      // 0 = empty
  };

  SnapshotRegion(int fd, void* base, size_t length, uint32_t slots)
      : fd_(fd), base_(static_cast<uint8_t*>(base)), length_(length), slots_(slots) {}
  SlotHeader* slot_header(uint32_t slot) const;
  uint8_t* slot_data(uint32_t slot) const;

  int fd_;
  uint8_t* base_;
  size_t length_;
  uint32_t slots_;
};

}  // namespace pgfleet::metrics
