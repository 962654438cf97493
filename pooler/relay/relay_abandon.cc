// The relay's side of a client that went away mid-query: ending its unfinished work on the server
// and telling when the server is clean again (docs/architecture.md, "Abandoned queries").
#include "pooler/base/strings.h"
#include "pooler/protocol/builders.h"
#include "pooler/relay/relay.h"

namespace pgfleet::pool {
namespace {

// What FromClient passes on from bytes pgfleet made itself goes to one sink.
class SinkOutput final : public RelayOutput {
 public:
  SinkOutput(std::span<const uint8_t> input, protocol::ByteSink& sink)
      : input_(input), sink_(sink) {}
  void Pass(size_t begin, size_t end) override { sink_.Append(input_.data() + begin, end - begin); }
  void Insert(std::span<const uint8_t> bytes) override { sink_.Append(bytes.data(), bytes.size()); }

 private:
  std::span<const uint8_t> input_;
  protocol::ByteSink& sink_;
};

}  // namespace

bool Relay::Abandon(absl::Time now, protocol::ByteSink& to_server) {
  if (client_ == nullptr) return true;
  ClientStream& client = *client_;
  if (!staged_.empty() || !tx_effects_.empty()) {
    // Session effects still in flight may yet take on the server, unknown to applied_: only a
    // reset makes it safe for another client.
    session_reset_required_ = true;
    staged_.clear();
    tx_effects_.clear();
    tx_rolled_back_ = false;
    watch_try_lock_rows_ = false;
  }
  if (client.mid_message()) {
    Unlink();
    return false;
  }
  // An extended-protocol COPY whose batch's Sync PostgreSQL ignored still waits for a Sync.
  const bool copy_sync_owed = !rfq_owed_.empty() && rfq_owed_.back() == kCopySync;
  const bool needs_sync = client.unsynced || copy_sync_owed;
  protocol::StringSink ending;
  if (client.in_copy_in) {
    protocol::BuildCopyFail(ending, "client disconnected");
  } else if (needs_sync) {
    // A Sync alone would commit what the batch did; PostgreSQL rolls it back when its client
    // vanishes. The unnamed portal is closed first, so the Execute fails whatever the client
    // left behind, and the error makes the Sync roll the batch back.
    protocol::BuildClose(ending, 'P', "");
    protocol::BuildExecute(ending, "", 0);
  }
  if (needs_sync) protocol::BuildSync(ending);
  if (!ending.bytes().empty()) {
    const std::span<const uint8_t> bytes(base::AsBytes(ending.bytes()));
    SinkOutput out(bytes, to_server);
    protocol::StringSink nobody;
    // Accounted exactly as if the client had sent them: what they are owed, in order.
    (void)FromClient(bytes, now, out, nobody);
  }
  Unlink();
  protocol::StringSink nobody;
  (void)TakeReadyAnswers(nobody);
  return true;
}

Relay::DrainStep Relay::NextDrainStep() const {
  if (!rfq_owed_.empty() || hidden_rfq_ > 0 || !pending_.empty() || backend_.mid_message()) {
    return DrainStep::kWait;
  }
  return tx_status_ == 'I' ? DrainStep::kClean : DrainStep::kRollBack;
}

}  // namespace pgfleet::pool
