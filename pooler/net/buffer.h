// A per-connection byte buffer whose storage comes from a per-thread pool of fixed chunks, so an
// idle connection holds no memory and steady-state traffic does no malloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "pooler/protocol/byte_sink.h"

namespace pgfleet::net {

class Buffer final : public protocol::ByteSink {
 public:
  static constexpr size_t kChunkSize = 32 * 1024;

  Buffer() = default;
  ~Buffer() override;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  size_t size() const { return end_ - begin_; }
  bool empty() const { return begin_ == end_; }
  std::span<const uint8_t> Readable() const { return {data_ + begin_, end_ - begin_}; }
  std::span<uint8_t> MutableReadable() { return {data_ + begin_, end_ - begin_}; }
  void Consume(size_t n);

  // Space to write at least `min_size` bytes (compacting or growing as needed).
  std::span<uint8_t> PrepareWrite(size_t min_size = 1);
  void Commit(size_t n) { end_ += n; }

  using ByteSink::Append;
  void Append(const uint8_t* data, size_t size) override;

  // Returns storage to the pool when empty (call after draining).
  void ReleaseIfEmpty();
  // Bytes of storage currently held.
  size_t capacity() const { return capacity_; }

 private:
  void Reserve(size_t total);

  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace pgfleet::net
