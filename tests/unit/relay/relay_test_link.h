// What the relay's unit tests share: wire messages of either direction, a recorder of what the
// relay sends one way, and a Link of one client to one server's relay fed like the connections
// feed it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/sqlstate.h"
#include "pooler/relay/relay.h"
#include "tests/unit/protocol/test_bytes.h"

namespace pgfleet::pool::relay_testing {

using protocol::StringSink;
using protocol::testing::AsBytes;
using protocol::testing::Build;
using protocol::testing::I16;
using protocol::testing::I32;
using protocol::testing::Typed;

// Frontend messages.
inline std::string Query(std::string_view sql) {
  return Build([&](StringSink& s) { protocol::BuildQuery(s, sql); });
}
inline std::string Parse(std::string_view name, std::string_view sql) {
  return Build([&](StringSink& s) { protocol::BuildParse(s, name, sql, {}); });
}
// The server-side name pgfleet gives a statement Parse(name, sql) makes: it derives from the Parse
// tail (query, NUL, no parameter types).
inline std::string Renamed(std::string_view sql, uint64_t epoch = 0) {
  return StatementServerName(std::string(sql) + std::string(1, '\0') + I16(0), epoch);
}
inline std::string Bind(std::string_view statement, std::string_view portal = "") {
  return Build([&](StringSink& s) { protocol::BuildBindText(s, portal, statement, {}); });
}
inline std::string Describe(char kind, std::string_view name) {
  return Build([&](StringSink& s) { protocol::BuildDescribe(s, kind, name); });
}
inline std::string Close(char kind, std::string_view name) {
  return Build([&](StringSink& s) { protocol::BuildClose(s, kind, name); });
}
inline std::string Execute() {
  return Build([](StringSink& s) { protocol::BuildExecute(s, "", 0); });
}
inline std::string Sync() {
  return Build([](StringSink& s) { protocol::BuildSync(s); });
}
inline std::string CopyData(std::string_view data) { return Typed('d', data); }
inline std::string CopyDone() { return Typed('c', ""); }
inline std::string CopyFail() { return Typed('f', std::string("gave up\0", 8)); }
inline std::string Terminate() { return Typed('X', ""); }

// Backend messages.
inline std::string Ready(char status) {
  return Build([&](StringSink& s) { protocol::BuildReadyForQuery(s, status); });
}
inline std::string Complete(std::string_view tag) {
  return Build([&](StringSink& s) { protocol::BuildCommandComplete(s, tag); });
}
inline std::string Error(std::string_view sqlstate = "42P01") {
  return Build([&](StringSink& s) {
    protocol::BuildErrorResponse(s, "ERROR", sqlstate, "relation does not exist");
  });
}
inline std::string ParseComplete() {
  return Build([](StringSink& s) { protocol::BuildParseComplete(s); });
}
inline std::string BindComplete() {
  return Build([](StringSink& s) { protocol::BuildBindComplete(s); });
}
inline std::string CloseComplete() {
  return Build([](StringSink& s) { protocol::BuildCloseComplete(s); });
}
inline std::string NoData() {
  return Build([](StringSink& s) { protocol::BuildNoData(s); });
}
inline std::string Row(std::string_view value) {
  const std::string_view values[] = {value};
  return Build([&](StringSink& s) { protocol::BuildDataRow(s, values); });
}
inline std::string ParamStatus(std::string_view name, std::string_view value) {
  return Build([&](StringSink& s) { protocol::BuildParameterStatus(s, name, value); });
}
inline std::string CopyInResponse() { return Typed('G', std::string("\0\0\0", 3)); }
inline std::string CopyOutResponse() { return Typed('H', std::string("\0\0\0", 3)); }

// Collects what the relay sends one way: passed runs of the input and inserted bytes, in order.
class Recorder final : public RelayOutput {
 public:
  explicit Recorder(std::string_view input) : input_(input) {}
  void Pass(size_t begin, size_t end) override {
    ASSERT_LE(begin, end);
    ASSERT_LE(end, input_.size());
    out_.append(input_.substr(begin, end - begin));
  }
  void Insert(std::span<const uint8_t> bytes) override {
    out_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  const std::string& out() const { return out_; }

 private:
  std::string_view input_;
  std::string out_;
};

class CountingObserver final : public RelayObserver {
 public:
  void OnQueryAnswered() override { ++answered; }
  void OnServerError(std::string_view sqlstate) override { errors.emplace_back(sqlstate); }
  void OnHiddenQueryFailed(std::string_view) override { ++hidden_failures; }
  int answered = 0;
  std::vector<std::string> errors;
  int hidden_failures = 0;
};

// One client linked to one server's relay; bytes not yet decided wait for the next feed, as in
// the connections' input buffers.
// A pin limit that always admits (session tracking needs one).
class NoPinLimit final : public PinLimit {
 public:
  bool MayPin() const override { return true; }
  int limit() const override { return 0; }
  void OnPinChanged(bool, uint32_t) override {}
};

class Link {
 public:
  explicit Link(bool track_prepared = false, ClientStream* client = nullptr,
                SessionTracking session = SessionTracking::kOff)
      : tracked_({"search_path"}), settings_(Settings(track_prepared, session)), relay_(settings_) {
    own_client_.emplace(1u << 30, tracked_.size());
    relay_.Link(client != nullptr ? client : &*own_client_);
  }

  // The client sends `bytes`; returns what the server got.
  std::string FromClient(std::string_view bytes) {
    client_pending_ += bytes;
    Recorder to_server(client_pending_);
    StringSink answers;
    verdict_ = relay_.FromClient(AsBytes(client_pending_), absl::UnixEpoch(), to_server, answers);
    client_got_ += answers.bytes();
    client_pending_.erase(0, verdict_.consumed);
    return to_server.out();
  }
  // The server sends `bytes`; returns what the client got.
  std::string FromServer(std::string_view bytes) {
    server_pending_ += bytes;
    Recorder to_client(server_pending_);
    const BackendVerdict verdict =
        relay_.FromServer(AsBytes(server_pending_), to_client, observer_);
    EXPECT_FALSE(verdict.protocol_error);
    server_pending_.erase(0, verdict.consumed);
    client_got_ += to_client.out();
    // As ServerConn does: the client's input that waited for these answers is fed again.
    if (relay_.client_waits()) resumed_to_server_ += FromClient("");
    return to_client.out();
  }
  // What the server got when the client's waiting input was fed again (and since the last call).
  std::string TakeResumedToServer() { return std::exchange(resumed_to_server_, {}); }
  // Stand-in answers sent to the client while it sent (and everything since the last call).
  std::string TakeClientAnswers() { return std::exchange(client_got_, {}); }

  Relay& relay() { return relay_; }
  ClientStream& client() { return *own_client_; }
  const FrontendVerdict& verdict() const { return verdict_; }
  CountingObserver& observer() { return observer_; }
  StatementRegistry& registry() { return registry_; }
  const RelaySettings& settings() const { return settings_; }

 private:
  RelaySettings Settings(bool track_prepared, SessionTracking session) {
    RelaySettings settings;
    settings.session = session;
    settings.pins = &pins_;
    settings.track_prepared = track_prepared;
    settings.max_prepared_statements = 2;
    settings.tracked = &tracked_;
    settings.statements = &registry_;
    return settings;
  }

  TrackedParamNames tracked_;
  StatementRegistry registry_;
  NoPinLimit pins_;
  RelaySettings settings_;
  Relay relay_;
  std::optional<ClientStream> own_client_;
  CountingObserver observer_;
  FrontendVerdict verdict_;
  std::string client_pending_;
  std::string server_pending_;
  std::string client_got_;
  std::string resumed_to_server_;
};

}  // namespace pgfleet::pool::relay_testing
