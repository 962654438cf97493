// The relay's output onto a connection: adjacent runs of the input chunk go out as one write, so
// a chunk of many small messages costs one send, as before the relay was split out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "pooler/net/connection.h"
#include "pooler/relay/relay.h"

namespace pgfleet::pool {

class ConnectionOutput final : public RelayOutput {
 public:
  // `to` may be null (nobody to send to: output is dropped). `input` is the chunk being relayed.
  ConnectionOutput(net::Connection* to, std::span<const uint8_t> input) : to_(to), input_(input) {}

  void Pass(size_t begin, size_t end) override {
    if (to_ == nullptr) return;
    if (begin != run_end_) {
      FlushRun();
      run_begin_ = begin;
    }
    run_end_ = end;
    passed_ += end - begin;
  }
  void Insert(std::span<const uint8_t> bytes) override {
    if (to_ == nullptr) return;
    FlushRun();
    if (!failed_ && !to_->Send(bytes)) failed_ = true;
  }
  // Sends what is left; false when a write failed (later output was dropped).
  [[nodiscard]] bool Finish() {
    FlushRun();
    return !failed_;
  }
  // Input bytes passed on unchanged (traffic counters).
  size_t passed() const { return passed_; }

 private:
  void FlushRun() {
    if (run_end_ > run_begin_ && !failed_ &&
        !to_->Send(input_.subspan(run_begin_, run_end_ - run_begin_))) {
      failed_ = true;
    }
    run_begin_ = run_end_;
  }

  net::Connection* to_;
  std::span<const uint8_t> input_;
  size_t run_begin_ = 0;
  size_t run_end_ = 0;
  size_t passed_ = 0;
  bool failed_ = false;
};

}  // namespace pgfleet::pool
