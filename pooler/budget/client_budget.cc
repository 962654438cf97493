// Shared client connection budget.
#include "pooler/budget/client_budget.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pooler/base/strings.h"

namespace pgfleet::budget {

ClientBudget::Region* ClientBudget::Map(int fd) {
  void* p = mmap(nullptr, sizeof(Region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<Region*>(p);
}

absl::StatusOr<int> ClientBudget::CreateSharedRegion() {
  int fd = memfd_create("pgfleet-clients", 0);  // no CLOEXEC: workers inherit it
  if (fd < 0) return absl::InternalError(base::StrCat("memfd_create: ", strerror(errno)));
  if (ftruncate(fd, sizeof(Region)) != 0) {
    close(fd);
    return absl::InternalError(base::StrCat("ftruncate: ", strerror(errno)));
  }
  return fd;  // zero-filled: every counter starts at 0
}

void ClientBudget::ReleaseSlot(int region_fd, uint32_t slot) {
  Region* region = Map(region_fd);
  if (region == nullptr) return;
  int64_t held = region->per_slot[slot % kSlots].exchange(0);
  region->total.fetch_sub(held);
  munmap(region, sizeof(Region));
}

ClientBudget::~ClientBudget() {
  if (region_ != nullptr) munmap(region_, sizeof(Region));
}

absl::Status ClientBudget::AttachShared(int region_fd, uint32_t slot) {
  region_ = Map(region_fd);
  if (region_ == nullptr) return absl::InternalError(base::StrCat("mmap: ", strerror(errno)));
  slot_ = slot % kSlots;
  return absl::OkStatus();
}

bool ClientBudget::TryAcquire() {
  if (region_ == nullptr) {
    if (limit_ > 0 && local_ >= limit_) return false;
    ++local_;
    return true;
  }
  if (limit_ > 0 && region_->total.fetch_add(1) >= limit_) {
    region_->total.fetch_sub(1);
    return false;
  }
  if (limit_ <= 0) region_->total.fetch_add(1);
  region_->per_slot[slot_].fetch_add(1);
  return true;
}

void ClientBudget::Release() {
  if (region_ == nullptr) {
    --local_;
    return;
  }
  region_->per_slot[slot_].fetch_sub(1);
  region_->total.fetch_sub(1);
}

int64_t ClientBudget::pod_total() const {
  return region_ == nullptr ? local_ : region_->total.load();
}

}  // namespace pgfleet::budget
