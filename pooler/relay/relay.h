// The relay between a client and the server it is linked to, without sockets: fed the bytes each
// side sends, it decides what the other side gets (passed on, replaced, hidden, or answered by
// pgfleet) and keeps everything the transaction-pooling release rule needs. ClientConn and
// ServerConn are I/O shells around it; unit tests and a fuzzer drive it with byte streams
// (docs/architecture.md, "The relay").
//
// State lives where it belongs: what pgfleet knows of a client across servers (its prepared
// statement names, the parameters it set, where its stream is) in a ClientStream owned by the
// ClientConn; what it knows of a server (answers it still owes, transaction status, statements it
// has) in the Relay owned by the ServerConn. Linking points the Relay at the client's stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "pooler/protocol/byte_sink.h"
#include "pooler/protocol/stream_decoder.h"
#include "pooler/relay/client_session.h"
#include "pooler/relay/param_sync.h"
#include "pooler/relay/prepared_statements.h"

namespace pgfleet::pool {

// Where relayed bytes go. The shell coalesces adjacent runs into one write.
class RelayOutput {
 public:
  virtual ~RelayOutput() = default;
  // Bytes [begin, end) of the chunk being processed, unchanged.
  virtual void Pass(size_t begin, size_t end) = 0;
  // Bytes pgfleet made, at this point of the stream.
  virtual void Insert(std::span<const uint8_t> bytes) = 0;
};

// What the relay reports about server messages; counters and logs, never I/O.
class RelayObserver {
 public:
  virtual ~RelayObserver() = default;
  // A ReadyForQuery ended a client query on a linked server.
  virtual void OnQueryAnswered() {}
  // ... and it says idle ('I'): the client's transaction (or autocommit statement) ended. Counted
  // here, not at release, so that session pooling counts transactions as PgBouncer does.
  virtual void OnTransactionEnded() {}
  // An ErrorResponse for the client's (or nobody's) query, with its SQLSTATE.
  virtual void OnServerError(std::string_view /*sqlstate*/) {}
  // A query pgfleet sent itself (SET, check, reset) failed: the server cannot be vouched for.
  virtual void OnHiddenQueryFailed(std::string_view /*message*/) {}
  // The server reported in_hot_standby after login: it was promoted (off) or, rarely, the
  // session outlived a switch the other way.
  virtual void OnHotStandbyReport(bool /*in_hot_standby*/) {}
};

// What the relay does with session state a client creates in transaction or statement pooling
// (config's session_state): kOff relays it untouched, as in session pooling.
enum class SessionTracking : uint8_t { kOff, kTrack, kRefuse };

// The pool's limit on servers pinned to clients by session state (max_pinned_servers).
class PinLimit {
 public:
  virtual ~PinLimit() = default;
  // Whether one more client may pin a server now.
  virtual bool MayPin() const = 0;
  virtual int limit() const = 0;
  // A client's session started (true) or stopped (false) holding state that pins its server.
  virtual void OnPinChanged(bool pinned, uint32_t pin_mask) = 0;
};

// Settings shared by every relay of a pool (the pool updates them on reload).
struct RelaySettings {
  uint32_t max_packet_size = 1u << 30;
  // Named prepared statements are renamed and tracked per server (transaction/statement mode).
  bool track_prepared = false;
  size_t max_prepared_statements = 0;
  const TrackedParamNames* tracked = nullptr;  // not null
  StatementRegistry* statements = nullptr;     // worker-wide interning; not null when tracking
  SessionTracking session = SessionTracking::kOff;
  PinLimit* pins = nullptr;  // not null unless session is kOff
};

// What is left to drop of a client's query that a CancelRequest answered while it waited for a
// server (queued_cancel.h): the rest of that simple Query (or FunctionCall), or everything up to
// and including the Sync that ends its extended-protocol batch.
enum class CancelledRest : uint8_t { kNone, kMessage, kThroughSync };

// The client's half of the protocol state; survives changes of server.
struct ClientStream {
  ClientStream(uint32_t max_packet_size, size_t tracked_slots)
      : decoder(max_packet_size), params(tracked_slots) {}

  protocol::StreamDecoder decoder;  // where the client's stream is (inside a message or not)
  ParamSet params;                  // tracked parameters the client wants
  // Named prepared statements by the client's name (transaction/statement mode).
  absl::flat_hash_map<std::string, StatementPtr> statements;
  // Session state it made (SET, pins), and the session effects of its extended-protocol
  // statements by name and of its unnamed portal: staged when an Execute runs them.
  ClientSession session;
  absl::flat_hash_map<std::string, sql::Effects> statement_effects;
  sql::Effects portal_effects;
  bool unnamed_refused = false;  // its unnamed statement is pgfleet's refusal (relay_session.cc)
  // Its unnamed statement is a DEALLOCATE of its renamed statement of this name, which the server
  // got as kDeallocateStandIn; a Bind of it makes `portal_deallocates` that portal, whose Execute
  // forgets the name (Relay::RewritePrepared).
  std::optional<std::string> unnamed_deallocates;
  struct DeallocatePortal {
    std::string portal;
    std::string name;
  };
  std::optional<DeallocatePortal> portal_deallocates;
  // The statements it closed or deallocated last (a few): a Parse of one of them again is
  // analysed afresh (Relay::RewritePrepared).
  void RememberClosed(StatementPtr statement) {
    if (closed_statements.size() == kClosedRemembered)
      closed_statements.erase(closed_statements.begin());
    closed_statements.push_back(std::move(statement));
  }
  // Whether it closed the statement of this Parse tail in `epoch` (the current one), forgetting it.
  bool TakeClosed(std::string_view parse_tail, uint64_t epoch) {
    return std::erase_if(closed_statements, [&](const StatementPtr& closed) {
             return closed->epoch == epoch && closed->parse_tail == parse_tail;
           }) > 0;
  }
  static constexpr size_t kClosedRemembered = 8;
  std::vector<StatementPtr> closed_statements;
  bool in_copy_in = false;  // inside COPY FROM STDIN
  bool unsynced = false;    // sent extended-protocol messages not yet closed by Sync
  // A query cancelled while queued: its rest is dropped as it arrives, never relayed.
  CancelledRest cancelled_rest = CancelledRest::kNone;

  bool mid_message() const { return decoder.mid_message(); }
};

// What to do after a chunk of client bytes.
struct FrontendVerdict {
  enum class Kind {
    kContinue,   // relay on
    kTerminate,  // the client sent Terminate: close it
    kReject,     // send FATAL `sqlstate` `message` to the client and close it
  };
  Kind kind = Kind::kContinue;
  size_t consumed = 0;      // input bytes decided; the rest waits for more
  bool copy_ended = false;  // a CopyDone/CopyFail ended COPY FROM STDIN in this chunk
  // kReject only.
  std::string_view sqlstate;
  std::string message;
  bool protocol_error = false;  // counted as a protocol error
};

struct BackendVerdict {
  size_t consumed = 0;
  bool protocol_error = false;  // a bad length from the server: close it
};

class Relay {
 public:
  explicit Relay(const RelaySettings& settings);

  // The client whose stream this server carries, or nullptr.
  void Link(ClientStream* client) {
    client_ = client;
    client_waits_ = false;
  }
  void Unlink() {
    client_ = nullptr;
    client_waits_ = false;
  }
  ClientStream* client() const { return client_; }

  // Client -> server: decides the front of `data`. What the server gets goes to `to_server`;
  // stand-in answers due at once (ParseComplete/CloseComplete for messages the server never saw)
  // are appended to `to_client`. `now` stamps the start of a query.
  FrontendVerdict FromClient(std::span<const uint8_t> data, absl::Time now, RelayOutput& to_server,
                             protocol::ByteSink& to_client);

  // Server -> client: what the linked client gets goes to `to_client` (nothing when unlinked).
  BackendVerdict FromServer(std::span<const uint8_t> data, RelayOutput& to_client,
                            RelayObserver& observer);

  // A query pgfleet sends itself (parameter sync, check, reset): appends it to `to_server`; its
  // answers up to and including its ReadyForQuery never reach a client.
  void AddHiddenQuery(protocol::ByteSink& to_server, std::string_view sql);

  // The release rule: everything sent has been answered, the server is outside a transaction, and
  // the client is outside COPY, has closed its extended messages with Sync and is between
  // messages. Only then may the server serve another client.
  bool IsReleasable() const;
  bool in_transaction() const { return tx_status_ != 'I'; }
  // Inside a transaction that has not failed, with nothing owed to the client or sent to the
  // server unanswered: pgfleet may answer the client itself in order (a DEALLOCATE of a renamed
  // statement, which psycopg sends mid-transaction when its statement cache evicts).
  bool QuietInTransaction() const {
    return tx_status_ == 'T' && rfq_owed_.empty() && hidden_rfq_ == 0 && pending_.empty() &&
           !backend_.mid_message() && staged_.empty();
  }
  bool query_in_progress() const { return !rfq_owed_.empty(); }
  // Batches (up to their ReadyForQuery) whose answers are still owed to the client's work.
  size_t batches_owed() const { return rfq_owed_.size(); }
  bool hidden_in_flight() const { return hidden_rfq_ > 0; }
  // The last FromClient stopped before a message whose meaning depends on answers the server
  // still owes: a Parse of a statement name that a Parse, Close or DEALLOCATE of an earlier batch
  // in flight gives or takes (PostgreSQL answers 42P05 or ParseComplete as that one went). The
  // shell holds the rest of the client's input, reads no more, and feeds it again after the
  // server's next answers (FromServer). A Sync ends that earlier batch, so its answer comes.
  bool client_waits() const { return client_waits_; }
  absl::Time query_started_at() const { return query_started_at_; }
  // When the client's current transaction began: the first query after the server was idle.
  absl::Time transaction_started_at() const { return transaction_started_at_; }
  // A statement-mode client opened a transaction block: nothing is in flight and it is still open.
  bool TransactionLeftOpen() const {
    return rfq_owed_.empty() && hidden_rfq_ == 0 && tx_status_ != 'I';
  }

  // The linked client went away with its work unfinished (docs/architecture.md, "Abandoned
  // queries"). Appends to `to_server` what ends that work as a vanished PostgreSQL client's work
  // ends: COPY FROM STDIN fails (CopyFail), and an extended-protocol batch still open fails (an
  // Execute of a portal that cannot exist) and gets its Sync, so its implicit transaction rolls
  // back instead of committing. Accounts for the answers these bring, as for the client's own
  // messages, and unlinks. Returns false (unlinked too) when the client stopped inside a message:
  // the server waits for the rest, which nobody can send, so it must be closed.
  [[nodiscard]] bool Abandon(absl::Time now, protocol::ByteSink& to_server);
  // What a server whose client went away needs next (after Abandon).
  enum class DrainStep {
    kWait,      // answers are still owed (the client's query, pgfleet's ending of it, a ROLLBACK)
    kRollBack,  // everything is answered but a transaction is open: roll it back
    kClean,     // everything is answered and no transaction is open: it may serve again
  };
  DrainStep NextDrainStep() const;

  // Tracked parameters as the server has them now.
  const ParamSet& params() const { return params_; }
  ParamSet& mutable_params() { return params_; }
  ServerStatementCache& statements() { return statements_; }
  const ServerStatementCache& statements() const { return statements_; }

  // Settings clients made on this server (SET, set_config), as pgfleet replays and undoes them.
  const SessionSettings& applied_settings() const { return applied_; }
  void set_applied_settings(const SessionSettings& settings) { applied_ = settings; }
  // The client that leaves this server held state that pins it: it must be reset (DISCARD ALL)
  // before anyone else uses it. Cleared when the server reports DISCARD ALL.
  void RequireSessionReset() { session_reset_required_ = true; }
  bool session_reset_required() const { return session_reset_required_; }

  // Stand-in answers due now that nothing the server owes comes before them; false when none.
  bool TakeReadyAnswers(protocol::ByteSink& to_client);

  // A client's `DEALLOCATE name` (simple, or psycopg's extended Parse/Bind/Describe/Execute/
  // Sync of it) for a statement pgfleet renamed: no server knows that name, so pgfleet forgets it
  // and answers, ReadyForQuery (`tx_status`) included. Only where nothing is in flight to the
  // client: when it is idle, or inside a transaction on a quiet server (QuietInTransaction).
  // Returns the bytes of `data` answered, 0 when the front of `data` is not such a DEALLOCATE.
  static size_t AnswerIdleDeallocate(ClientStream& client, std::span<const uint8_t> data,
                                     protocol::ByteSink& to_client, char tx_status = 'I');

 private:
  // What the server owes for each extended-protocol message in flight (see Pending).
  void PushPending(PendingKind kind, PendingAction action, StatementPtr statement = nullptr) {
    Pending pending;
    pending.kind = kind;
    pending.action = action;
    pending.statement = std::move(statement);
    pending_.push_back(std::move(pending));
  }
  // A failed or skipped Parse gave the client its name: the name is free again.
  void ForgetFailedName(const Pending& parse);
  // A skipped Close or DEALLOCATE took the client's name away: it has it again.
  void RestoreSkippedName(const Pending& close);
  // Whether a Parse, Close or DEALLOCATE of an earlier batch still unanswered gives or takes the
  // client's `name` (see client_waits).
  bool NameUnsettled(std::string_view name) const;
  // Returns false when the backend message must not reach the client.
  bool OnBackendMessage(uint8_t type, std::span<const uint8_t> body, RelayObserver& observer);
  bool OnPendingResponse(uint8_t type, std::span<const uint8_t> body);
  void OnCopyInResponse();
  // The end of a COPY whose CopyInResponse left Syncs that may be answered (kMaybeSync): an error
  // (they stay owed) or a CommandComplete (PostgreSQL ignored them).
  void ResolveMaybeSyncs(bool copy_failed);
  // A ReadyForQuery, or the end of an Execute (or of a statement), from the server: trims sent_.
  void OnServerProgress(uint8_t type);
  void UndoFailedPipeline();
  void TrackParameterStatus(std::span<const uint8_t> body, RelayObserver& observer);
  void EmitReadyAnswers(RelayOutput& to_client);

  // Session state (relay_session.cc). kRefused: the message was replaced by a query that fails
  // with pgfleet's ERROR (appended to `to_server`), so the client's transaction fails as it would
  // have for any other error.
  enum class SessionStep { kRelay, kNeedMore, kRefused };
  SessionStep OnSessionMessage(const protocol::StreamDecoder::Piece& piece, RelayOutput& to_server);
  SessionStep ClassifyQuery(std::string_view sql, RelayOutput& to_server);
  // The query that fails with pgfleet's ERROR for statements with `effects`, or "" when they
  // may run (session_state: refuse, max_pinned_servers).
  std::string Refusal(const sql::Effects& effects) const;
  void StageEffects(sql::Effects effects, size_t answers_left);
  void OnSessionServerMessage(uint8_t type, std::span<const uint8_t> body);
  void SettleSessionEffects();
  void OnTryLockRow(std::span<const uint8_t> body);
  void UpdateTryLockWatch();
  void ApplySessionEffect(const sql::Effect& effect);
  // Schema changes among effects that failed or rolled back start an epoch all the same.
  void UndoSchemaChanges(const sql::Effects& effects);

  // Prepared statements (relay_prepared.cc).
  enum class Rewrite { kPassThrough, kReplace, kNeedMore, kWait, kReject };
  // Renames statements in Parse/Bind/Describe/Close, and sends kDeallocateStandIn for a client's
  // DEALLOCATE of one (a Query, or the unnamed statement's Parse and its portal's Execute); counts
  // the answer each of those messages is owed (pending_). kReplace: `scratch_` holds bytes to send
  // instead of the message's first `*skip` bytes. kReject: `verdict` says why.
  Rewrite RewritePrepared(const protocol::StreamDecoder::Piece& piece, size_t* skip,
                          FrontendVerdict* verdict);
  void EnsureOnServer(const StatementPtr& statement);
  // Refuses the client's message as PostgreSQL does, with ERROR `sqlstate` `message` in its turn
  // (PendingAction::kReplaceError); the server gets `poison` (in scratch_), which fails there.
  Rewrite FailMessage(PendingKind poison, std::string_view sqlstate, std::string_view message);
  void AppendParse(const StatementPtr& statement, PendingAction action);

  const RelaySettings& settings_;
  ClientStream* client_ = nullptr;

  // The client messages a ReadyForQuery is owed for, oldest first: 'Q' (Query), 'S' (Sync), 'F'
  // (FunctionCall), or kCopySync. A deque rather than a count because PostgreSQL ignores Syncs in
  // COPY FROM STDIN, and which owed answers that cancels depends on their order (OnCopyInResponse).
  std::deque<uint8_t> rfq_owed_;
  // An extended-protocol COPY FROM STDIN whose batch's Sync the server ignored: its ReadyForQuery
  // comes with the client's first Sync (or Query, FunctionCall) after the COPY, which takes this
  // entry over. Until then the COPY counts as a query in progress and holds the server.
  static constexpr uint8_t kCopySync = 'c';
  // A Sync the client sent after CopyData before the CopyInResponse came: PostgreSQL answers it
  // only if that data already failed the COPY. Owed until the COPY's end tells (maybe_syncs_).
  static constexpr uint8_t kMaybeSync = 'm';
  static bool IsOwedEntry(uint8_t e) { return e == 'Q' || e == 'S' || e == 'F' || e == 'm'; }
  // The client's messages the server has not finished with, oldest first, as far as a
  // CopyInResponse needs them to tell which of them PostgreSQL reads inside that COPY (the client
  // may pipeline past a COPY before it learns that it is one): 'Q', 'S', 'F' (those owed a
  // ReadyForQuery, in rfq_owed_'s order but for kCopySync, and kSentMaybeSync for kMaybeSync),
  // 'E' (Execute), kSentCopyEnd (CopyDone, CopyFail), kSentCopyData (any run of CopyData sent
  // outside a COPY the relay knows of) and kSentOther (any run of other extended-protocol
  // messages sent on). Flush is not kept; Syncs inside a COPY are not sent on. Trimmed as the
  // server finishes them.
  std::deque<uint8_t> sent_;
  static constexpr uint8_t kSentCopyEnd = 'c';
  static constexpr uint8_t kSentOther = 'o';
  static constexpr uint8_t kSentCopyData = 'd';
  static constexpr uint8_t kSentMaybeSync = 'm';
  bool maybe_syncs_ = false;      // kMaybeSync entries wait for their COPY's end
  bool maybe_copy_sync_ = false;  // that COPY's batch answer goes to them or the next (kCopySync)
  int hidden_rfq_ = 0;            // ReadyForQuery owed for pgfleet's own queries
  bool client_waits_ = false;
  char tx_status_ = 'I';
  absl::Time query_started_at_;
  absl::Time transaction_started_at_;
  protocol::StreamDecoder backend_;
  bool backend_piece_hidden_ = false;  // the server message being streamed is swallowed
  std::deque<Pending> pending_;
  bool pipeline_failed_ = false;      // an error: the server skips to the next Sync
  bool failed_parse_exists_ = false;  // the failing message is a Parse of a statement it has
  // What the client gets in the place of the server message just hidden, due after it: its own
  // error (kReplaceError) or DEALLOCATE's CommandComplete (kReplaceTag).
  std::string replacement_;
  ParamSet params_;
  ServerStatementCache statements_;
  // Session effects sent to the server, waiting for the answers that tell whether they took:
  // each batch's effects settle at its ReadyForQuery (answers_left counts down to it), unless
  // an error failed the batch; transactional ones wait further for their transaction's end.
  struct StagedEffects {
    size_t answers_left;
    bool failed;
    sql::Effects effects;
  };
  std::deque<StagedEffects> staged_;
  sql::Effects tx_effects_;
  bool tx_rolled_back_ = false;
  // Statements of the batch being answered that have ended (CommandComplete, EmptyQuery,
  // PortalSuspended) and Executes of the batch being sent: they order a batch's effects against
  // a ROLLBACK inside that batch (`BEGIN; SET ...; ROLLBACK` in one Query).
  uint32_t statements_answered_ = 0;
  uint32_t executes_in_batch_ = 0;
  // A staged batch calls pg_try_advisory_lock: its DataRows are read whole (OnTryLockRow).
  bool watch_try_lock_rows_ = false;
  SessionSettings applied_;
  bool session_reset_required_ = false;
  protocol::StringSink scratch_;
};

}  // namespace pgfleet::pool
