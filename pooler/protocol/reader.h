// Bounds-checked big-endian cursor over a message body; every read reports failure instead of
// running past the end, so malformed input can never read out of bounds.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace pgfleet::protocol {

inline uint32_t LoadBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
inline uint16_t LoadBigEndian16(const uint8_t* p) {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}
inline void StoreBigEndian32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> data) : data_(data) {}

  size_t remaining() const { return data_.size() - pos_; }
  bool empty() const { return remaining() == 0; }
  std::span<const uint8_t> Rest() const { return data_.subspan(pos_); }

  [[nodiscard]] bool ReadByte(uint8_t* out) {
    if (remaining() < 1) return false;
    *out = data_[pos_++];
    return true;
  }
  [[nodiscard]] bool ReadInt16(int16_t* out) {
    if (remaining() < 2) return false;
    *out = static_cast<int16_t>(LoadBigEndian16(data_.data() + pos_));
    pos_ += 2;
    return true;
  }
  [[nodiscard]] bool ReadInt32(int32_t* out) {
    if (remaining() < 4) return false;
    *out = static_cast<int32_t>(LoadBigEndian32(data_.data() + pos_));
    pos_ += 4;
    return true;
  }
  // A NUL-terminated string; the view points into the message and excludes the NUL.
  [[nodiscard]] bool ReadCString(std::string_view* out) {
    if (remaining() == 0) return false;  // an empty span may have a null data(); memchr needs one
    const uint8_t* start = data_.data() + pos_;
    const void* nul = std::memchr(start, 0, remaining());
    if (nul == nullptr) return false;
    size_t len = static_cast<const uint8_t*>(nul) - start;
    *out = std::string_view(reinterpret_cast<const char*>(start), len);
    pos_ += len + 1;
    return true;
  }
  [[nodiscard]] bool ReadBytes(size_t n, std::span<const uint8_t>* out) {
    if (remaining() < n) return false;
    *out = data_.subspan(pos_, n);
    pos_ += n;
    return true;
  }

 private:
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
};

}  // namespace pgfleet::protocol
