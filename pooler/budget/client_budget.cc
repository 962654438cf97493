// Shared client connection budget.
#include "pooler/budget/client_budget.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "pooler/base/strings.h"

namespace pgfleet::budget {

ClientBudget::Region* ClientBudget::Map(int fd, size_t* size) {
  struct stat st;
  if (fstat(fd, &st) != 0) return nullptr;
  const size_t held = static_cast<size_t>(st.st_size);
  if (held < kPreBalanceSize) {
    errno = EINVAL;  // not a client budget region
    return nullptr;
  }
  // Pages past the end of the memfd would fault: map only what it holds.
  *size = std::min(held, sizeof(Region));
  void* p = mmap(nullptr, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
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
  size_t size = 0;
  Region* region = Map(region_fd, &size);
  if (region == nullptr) return;
  slot %= kSlots;
  if (size >= sizeof(Region)) region->takes_clients[slot].store(0);
  int64_t held = region->per_slot[slot].exchange(0);
  region->total.fetch_sub(held);
  munmap(region, size);
}

ClientBudget::~ClientBudget() {
  if (region_ != nullptr) munmap(region_, region_size_);
}

absl::Status ClientBudget::AttachShared(int region_fd, uint32_t slot) {
  region_ = Map(region_fd, &region_size_);
  if (region_ == nullptr) return absl::InternalError(base::StrCat("mmap: ", strerror(errno)));
  slot_ = slot % kSlots;
  balance_ = region_size_ >= sizeof(Region);
  if (balance_) {
    uint32_t seen = region_->max_slot.load();
    while (seen < slot_ && !region_->max_slot.compare_exchange_weak(seen, slot_)) {
    }
  }
  return absl::OkStatus();
}

void ClientBudget::SetTakesClients(bool takes) {
  if (balance_) region_->takes_clients[slot_].store(takes ? 1 : 0);
}

std::optional<uint32_t> ClientBudget::SiblingWithFewerClients() const {
  if (!balance_) return std::nullopt;
  const uint32_t limit = std::min<uint32_t>(kSlots - 1, region_->max_slot.load());
  std::optional<uint32_t> fewest;
  int64_t least = region_->per_slot[slot_].load(std::memory_order_relaxed);
  for (uint32_t slot = 0; slot <= limit; ++slot) {
    if (slot == slot_ || region_->takes_clients[slot].load(std::memory_order_relaxed) == 0) {
      continue;
    }
    const int64_t held = region_->per_slot[slot].load(std::memory_order_relaxed);
    if (held < least) {
      least = held;
      fewest = slot;
    }
  }
  return fewest;
}

bool ClientBudget::TryAcquire() {
  if (region_ == nullptr) {
    if (limit_ > 0 && local_ >= limit_) return false;
    ++local_;
    return true;
  }
  return TryAcquireIn(slot_);
}

bool ClientBudget::TryAcquireIn(uint32_t slot) {
  if (limit_ > 0 && region_->total.fetch_add(1) >= limit_) {
    region_->total.fetch_sub(1);
    return false;
  }
  if (limit_ <= 0) region_->total.fetch_add(1);
  region_->per_slot[slot].fetch_add(1);
  return true;
}

void ClientBudget::Release() {
  if (region_ == nullptr) {
    --local_;
    return;
  }
  ReleaseIn(slot_);
}

void ClientBudget::ReleaseIn(uint32_t slot) {
  region_->per_slot[slot].fetch_sub(1);
  region_->total.fetch_sub(1);
}

bool ClientBudget::TryAcquireFor(uint32_t sibling) {
  return balance_ && TryAcquireIn(sibling % kSlots);
}

void ClientBudget::ReleaseFor(uint32_t sibling) {
  if (balance_) ReleaseIn(sibling % kSlots);
}

int64_t ClientBudget::pod_total() const {
  return region_ == nullptr ? local_ : region_->total.load();
}

}  // namespace pgfleet::budget
