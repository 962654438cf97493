// Chunk-pooled buffers.
#include "pooler/net/buffer.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "pooler/base/check.h"

namespace pgfleet::net {
namespace {

// Free chunks of exactly kChunkSize, kept per thread (each worker is one thread). The pool owns
// them and frees them when its thread exits.
struct ChunkPool {
  std::vector<uint8_t*> chunks;
  ~ChunkPool() {
    for (uint8_t* chunk : chunks) std::free(chunk);
  }
};
std::vector<uint8_t*>& FreeChunks() {
  thread_local ChunkPool pool;
  return pool.chunks;
}
constexpr size_t kMaxFreeChunks = 1024;

uint8_t* Allocate(size_t size) {
  if (size == Buffer::kChunkSize && !FreeChunks().empty()) {
    uint8_t* chunk = FreeChunks().back();
    FreeChunks().pop_back();
    return chunk;
  }
  auto* p = static_cast<uint8_t*>(std::malloc(size));
  PGFLEET_CHECK(p != nullptr);
  return p;
}

void Free(uint8_t* p, size_t size) {
  if (p == nullptr) return;
  if (size == Buffer::kChunkSize && FreeChunks().size() < kMaxFreeChunks) {
    FreeChunks().push_back(p);
    return;
  }
  std::free(p);
}

}  // namespace

Buffer::~Buffer() { Free(data_, capacity_); }

void Buffer::Consume(size_t n) {
  begin_ += n;
  if (begin_ == end_) begin_ = end_ = 0;
}

void Buffer::Reserve(size_t total) {
  size_t new_capacity = capacity_ == 0 ? kChunkSize : capacity_;
  while (new_capacity < total) new_capacity *= 2;
  uint8_t* fresh = Allocate(new_capacity);
  if (size() > 0) std::memcpy(fresh, data_ + begin_, size());
  Free(data_, capacity_);
  end_ -= begin_;
  begin_ = 0;
  data_ = fresh;
  capacity_ = new_capacity;
}

std::span<uint8_t> Buffer::PrepareWrite(size_t min_size) {
  if (capacity_ - end_ < min_size) {
    if (begin_ > 0 && capacity_ - size() >= min_size) {
      std::memmove(data_, data_ + begin_, size());
      end_ -= begin_;
      begin_ = 0;
    } else {
      Reserve(size() + min_size);
    }
  }
  return {data_ + end_, capacity_ - end_};
}

void Buffer::Append(const uint8_t* data, size_t size) {
  if (size == 0) return;  // a buffer without storage has a null data_, which memcpy may not take
  auto space = PrepareWrite(size);
  std::memcpy(space.data(), data, size);
  Commit(size);
}

void Buffer::ReleaseIfEmpty() {
  if (empty() && data_ != nullptr) {
    Free(data_, capacity_);
    data_ = nullptr;
    capacity_ = begin_ = end_ = 0;
  }
}

}  // namespace pgfleet::net
