// The outgoing side of a gRPC bidirectional stream: messages queued from any thread, written one
// at a time (gRPC allows one write in flight per stream), in order.
#pragma once

#include <deque>
#include <utility>

namespace pgfleet::peering {

// Not thread-safe by itself: every call is made under the owning stream's mutex, which also
// guards the stream's own state (closed, finishing). The owner calls StartWrite on what Push and
// OnWriteDone return *after* releasing that mutex, since gRPC may run a reaction inline inside a
// Start* call. A returned pointer stays valid until the OnWriteDone that follows its write.
template <typename Message>
class StreamWriteQueue {
 public:
  // Queues `message`. Returns it when nothing was in flight (the caller starts writing it now),
  // else nullptr (OnWriteDone will hand it out in turn).
  const Message* Push(Message message) {
    queue_.push_back(std::move(message));
    if (writing_) return nullptr;
    writing_ = true;
    return &queue_.front();
  }

  // The write in flight finished. `keep_going` false (the write failed, or the stream is
  // closing) drops whatever is still queued. Returns the next message to write, or nullptr when
  // nothing is left in flight.
  const Message* OnWriteDone(bool keep_going) {
    if (!queue_.empty()) queue_.pop_front();
    if (!keep_going) queue_.clear();
    if (!queue_.empty()) return &queue_.front();
    writing_ = false;
    return nullptr;
  }

  // A write is in flight (it keeps the stream's reactor alive until OnWriteDone).
  bool writing() const { return writing_; }

 private:
  std::deque<Message> queue_;  // front() is being written while writing_
  bool writing_ = false;
};

}  // namespace pgfleet::peering
