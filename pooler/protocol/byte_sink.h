// Where builders write: an append-only byte destination, so codecs need no event loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pgfleet::protocol {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void Append(const uint8_t* data, size_t size) = 0;
  void Append(std::string_view s) { Append(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
};

// A sink over a std::string, for tests and for messages built off the hot path.
class StringSink final : public ByteSink {
 public:
  using ByteSink::Append;
  void Append(const uint8_t* data, size_t size) override {
    bytes_.append(reinterpret_cast<const char*>(data), size);
  }
  const std::string& bytes() const { return bytes_; }
  std::string& mutable_bytes() { return bytes_; }

 private:
  std::string bytes_;
};

}  // namespace pgfleet::protocol
