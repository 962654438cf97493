// The relay's stream handling and release rule (prepared statements: relay_prepared.cc).
#include "pooler/relay/relay.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/inlined_vector.h"
#include "pooler/base/strings.h"
#include "pooler/protocol/backend.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {

Relay::Relay(const RelaySettings& settings)
    : settings_(settings), backend_(settings.max_packet_size), params_(settings.tracked->size()) {}

bool Relay::IsReleasable() const {
  return rfq_owed_.empty() && hidden_rfq_ == 0 && tx_status_ == 'I' && !backend_.mid_message() &&
         pending_.empty() &&
         (client_ == nullptr ||
          (!client_->in_copy_in && !client_->unsynced && !client_->mid_message()));
}

void Relay::AddHiddenQuery(protocol::ByteSink& to_server, std::string_view sql) {
  protocol::BuildQuery(to_server, sql);
  ++hidden_rfq_;
}

FrontendVerdict Relay::FromClient(std::span<const uint8_t> data, absl::Time now,
                                  RelayOutput& to_server, protocol::ByteSink& to_client) {
  FrontendVerdict verdict;
  client_waits_ = false;
  if (client_ == nullptr) return verdict;
  ClientStream& client = *client_;
  client.decoder.set_max_length(settings_.max_packet_size);
  size_t pos = 0;
  while (pos < data.size()) {
    const auto piece = client.decoder.Peek(data.subspan(pos));
    if (piece.kind == protocol::StreamDecoder::Kind::kNeedMore) break;
    if (piece.kind == protocol::StreamDecoder::Kind::kProtocolError) {
      verdict.kind = FrontendVerdict::Kind::kReject;
      verdict.sqlstate = protocol::sqlstate::kProtocolViolation;
      verdict.message = "invalid message length from client";
      verdict.protocol_error = true;
      break;
    }
    if (piece.kind == protocol::StreamDecoder::Kind::kContinuation) {
      to_server.Pass(pos, pos + piece.bytes.size());
      client.decoder.Take(piece);
      pos += piece.bytes.size();
      continue;
    }
    if (absl::Status valid = protocol::CheckFrontendHeader(piece.header); !valid.ok()) {
      verdict.kind = FrontendVerdict::Kind::kReject;
      verdict.sqlstate = protocol::sqlstate::kProtocolViolation;
      verdict.message = std::string(base::Sv(valid.message()));
      verdict.protocol_error = true;
      break;
    }
    size_t skip = 0;        // leading bytes of this message replaced by a rewrite
    bool inserted = false;  // a rewrite sent bytes of pgfleet's own for this message
    if (settings_.session != SessionTracking::kOff) {
      const SessionStep step = OnSessionMessage(piece, to_server);
      if (step == SessionStep::kNeedMore) break;
      if (step == SessionStep::kRefused) {
        skip = piece.bytes.size();
        inserted = true;
      }
    }
    // A refused Parse or Bind is of the unnamed statement: RewritePrepared still counts its
    // answer.
    if (settings_.track_prepared &&
        (!inserted || piece.header.type == 'P' || piece.header.type == 'B')) {
      scratch_.mutable_bytes().clear();
      const Rewrite rewrite = RewritePrepared(piece, &skip, &verdict);
      if (rewrite == Rewrite::kNeedMore || rewrite == Rewrite::kReject) break;
      if (rewrite == Rewrite::kWait) {
        client_waits_ = true;
        break;
      }
      if (rewrite == Rewrite::kReplace && !scratch_.bytes().empty()) {
        const auto& bytes = scratch_.bytes();
        to_server.Insert(base::AsBytes(bytes));
        inserted = true;
      }
    }
    switch (piece.header.type) {
      case 'Q':
      case 'S':
      case 'F':
        if (piece.header.type == 'S' && client.in_copy_in) {
          // Inside COPY FROM STDIN a Sync is not sent on: while the COPY runs PostgreSQL ignores
          // it anyway, so the client sees no difference; a client cannot rely on an answer to it,
          // as PostgreSQL answers it only if the COPY already failed (bad data ends the COPY at
          // once), which the client cannot know when it sends it; and the answers owed stay
          // exact, where a Sync sent on would be answered or not as that race went. It does not
          // close the client's extended messages either: PostgreSQL never read it.
          skip = piece.bytes.size();
          break;
        }
        client.unsynced = false;
        if (!client.in_copy_in && !rfq_owed_.empty() && rfq_owed_.back() == kCopySync) {
          // The first after an extended-protocol COPY: the answer owed for the COPY's batch.
          rfq_owed_.back() = piece.header.type;
        } else {
          if (rfq_owed_.empty()) {
            query_started_at_ = now;
            // The first exchange after the server was idle opens a transaction (implicit or not).
            if (tx_status_ == 'I') transaction_started_at_ = now;
          }
          rfq_owed_.push_back(piece.header.type);
        }
        sent_.push_back(piece.header.type);
        if (settings_.track_prepared) PushPending(PendingKind::kSync, PendingAction::kForward);
        break;
      case 'E':
        // Its answer is accounted for in RewritePrepared (with track_prepared).
        client.unsynced = true;
        if (!inserted) {
          sent_.push_back('E');
        } else if (sent_.empty() || sent_.back() != kSentOther) {
          sent_.push_back(kSentOther);  // pgfleet's message that fails in its place
        }
        break;
      case 'P':
      case 'B':
      case 'D':
      case 'C':
        client.unsynced = true;
        // Only what reaches the server (pgfleet answers some Parse/Close itself).
        if ((skip < piece.bytes.size() || inserted) &&
            (sent_.empty() || sent_.back() != kSentOther)) {
          sent_.push_back(kSentOther);
        }
        break;
      case 'd':
        // CopyData the server may read as a COPY's before the relay knows it is one (no
        // CopyInResponse yet): a Sync after it may be answered (OnCopyInResponse).
        if (!client.in_copy_in && (sent_.empty() || sent_.back() != kSentCopyData)) {
          sent_.push_back(kSentCopyData);
        }
        break;
      case 'c':
      case 'f':
        verdict.copy_ended = verdict.copy_ended || client.in_copy_in;
        client.in_copy_in = false;
        sent_.push_back(kSentCopyEnd);
        break;
      case 'X':
        verdict.kind = FrontendVerdict::Kind::kTerminate;
        break;
      default:
        break;
    }
    if (verdict.kind == FrontendVerdict::Kind::kTerminate) break;
    if (pos + skip < pos + piece.bytes.size()) to_server.Pass(pos + skip, pos + piece.bytes.size());
    client.decoder.Take(piece);
    pos += piece.bytes.size();
  }
  verdict.consumed = pos;
  if (settings_.track_prepared && !backend_.mid_message()) TakeReadyAnswers(to_client);
  return verdict;
}

BackendVerdict Relay::FromServer(std::span<const uint8_t> data, RelayOutput& to_client,
                                 RelayObserver& observer) {
  BackendVerdict verdict;
  backend_.set_max_length(settings_.max_packet_size);
  size_t pos = 0;
  while (pos < data.size()) {
    const auto piece = backend_.Peek(data.subspan(pos));
    if (piece.kind == protocol::StreamDecoder::Kind::kNeedMore) break;
    if (piece.kind == protocol::StreamDecoder::Kind::kProtocolError) {
      verdict.protocol_error = true;
      break;
    }
    if (piece.kind == protocol::StreamDecoder::Kind::kMessage) {
      // Row data and COPY data stream through in pieces; everything the rule reads comes whole.
      const bool needs_body = protocol::BackendNeedsBody(piece.header.type) ||
                              (piece.header.type == 'D' && watch_try_lock_rows_);
      if (needs_body && !piece.whole()) break;
      backend_piece_hidden_ = !OnBackendMessage(
          piece.header.type, needs_body ? piece.body() : std::span<const uint8_t>(), observer);
    }
    if (!backend_piece_hidden_) to_client.Pass(pos, pos + piece.bytes.size());
    backend_.Take(piece);
    pos += piece.bytes.size();
    // Stand-in answers go out right after the message that made them due.
    if (!backend_.mid_message()) EmitReadyAnswers(to_client);
  }
  verdict.consumed = pos;
  return verdict;
}

void Relay::EmitReadyAnswers(RelayOutput& to_client) {
  if (!replacement_.empty()) {
    // In the place of the server's message, which it hid.
    if (client_ != nullptr) {
      to_client.Insert(base::AsBytes(replacement_));
    }
    replacement_.clear();
  }
  if (pending_.empty()) return;
  scratch_.mutable_bytes().clear();
  // Unlinked (its client went away), the stand-in answers still leave the queue in their turn,
  // so the server's own answers behind them are matched with what they answer.
  if (!TakeReadyAnswers(scratch_) || client_ == nullptr) return;
  const auto& bytes = scratch_.bytes();
  to_client.Insert(base::AsBytes(bytes));
}

bool Relay::TakeReadyAnswers(protocol::ByteSink& to_client) {
  bool any = false;
  while (!pipeline_failed_ && !pending_.empty()) {
    const auto action = pending_.front().action;
    if (action == PendingAction::kFakeParseComplete) {
      protocol::BuildParseComplete(to_client);
    } else if (action == PendingAction::kFakeCloseComplete) {
      protocol::BuildCloseComplete(to_client);
    } else {
      break;
    }
    pending_.pop_front();
    any = true;
  }
  return any;
}

void Relay::TrackParameterStatus(std::span<const uint8_t> body, RelayObserver& observer) {
  auto status = protocol::ParseParameterStatus(body);
  if (!status.ok()) return;
  if (status->name == "in_hot_standby") observer.OnHotStandbyReport(status->value == "on");
  const int slot = settings_.tracked->Find(status->name);
  if (slot < 0) return;
  params_.Set(static_cast<size_t>(slot), status->value);
  // A SET by the client (not one pgfleet injected) changes what the client wants from now on.
  if (client_ != nullptr && hidden_rfq_ == 0) {
    client_->params.Set(static_cast<size_t>(slot), status->value);
  }
}

bool Relay::OnPendingResponse(uint8_t type, std::span<const uint8_t> body) {
  switch (type) {
    case '1':    // ParseComplete
    case '2':    // BindComplete
    case '3':    // CloseComplete
    case 'n': {  // NoData (Describe)
      if (pending_.empty()) return true;
      const PendingAction action = pending_.front().action;
      pending_.pop_front();
      return action != PendingAction::kHide;
    }
    case 'T':  // RowDescription: ends a Describe; inside a Query it belongs to the Query
      if (!pending_.empty() && pending_.front().kind == PendingKind::kDescribe) {
        pending_.pop_front();
      }
      return true;
    case 'C':
    case 'I':
    case 's':
      if (!pending_.empty() && pending_.front().kind == PendingKind::kExecute) {
        const bool replace = type == 'C' && pending_.front().action == PendingAction::kReplaceTag;
        pending_.pop_front();
        if (replace) {
          // The end of kDeallocateStandIn: the client gets the DEALLOCATE it sent.
          protocol::StringSink tag;
          protocol::BuildCommandComplete(tag, "DEALLOCATE");
          replacement_ = std::move(tag.mutable_bytes());
          return false;
        }
      }
      return true;
    case 'E':
      // The failing message is the head (unless it is a simple Query, answered by its 'Z'); it
      // stays there, undone with the messages skipped after it when the 'Z' comes.
      // Errors always reach the client: a failed re-Parse reports for the message that needed it.
      if (!pending_.empty() && pending_.front().kind != PendingKind::kSync) {
        pipeline_failed_ = true;
        if (pending_.front().action == PendingAction::kReplaceError) {
          // The message pgfleet made fail in the place of one it refused: the client gets its
          // own error instead (EmitReadyAnswers), and the skip to the Sync is the same.
          replacement_ = std::move(pending_.front().error);
          return false;
        }
        // A renamed Parse refused because the server has the statement: pgfleet re-parsed it
        // before it learned that an earlier batch's eviction Close was skipped. It is there.
        if (pending_.front().kind == PendingKind::kParse && pending_.front().statement != nullptr) {
          auto fields = protocol::ParseErrorFields(body);
          failed_parse_exists_ =
              fields.ok() && fields->sqlstate == protocol::sqlstate::kDuplicatePreparedStatement;
        }
      }
      return true;
    case 'Z':
      if (pipeline_failed_) UndoFailedPipeline();
      if (!pending_.empty() && pending_.front().kind == PendingKind::kSync) pending_.pop_front();
      return true;
    default:
      return true;
  }
}

void Relay::UndoFailedPipeline() {
  // The failing message and everything after it up to the Sync did not happen on the server. Each
  // statement they name is left as it was before the first of them that names it: a Parse (pgfleet
  // parses only what it believes the server lacks) means it was not there, an eviction Close means
  // it still is. Later ones in the same batch (a re-Parse after the eviction) change nothing.
  // The failing message is the head: a Parse of it refused with 42P05 says the statement is there.
  bool head_exists = failed_parse_exists_;
  absl::InlinedVector<const PreparedStatement*, 4> decided;
  // The client's names that skipped messages gave or took: undone last first, so that each name
  // ends as it was before the first of them (a Close then a re-Parse of one name, or the reverse).
  std::vector<Pending> renames;
  while (!pending_.empty() && pending_.front().kind != PendingKind::kSync) {
    Pending skipped = std::move(pending_.front());
    pending_.pop_front();
    const bool exists = std::exchange(head_exists, false) || skipped.found_there;
    if (skipped.named_here || skipped.unnamed_here) {
      Pending rename;
      rename.client_name = skipped.client_name;
      rename.named_here = skipped.named_here;
      rename.unnamed_here = skipped.unnamed_here;
      rename.named = skipped.named;
      renames.push_back(std::move(rename));
    }
    if (skipped.statement == nullptr || absl::c_linear_search(decided, skipped.statement.get())) {
      continue;
    }
    decided.push_back(skipped.statement.get());
    // A later batch already in flight that Parses or Closes it decides instead: the cache holds
    // what that batch makes of it (a Parse that finds the statement there fails with 42P05 and
    // puts it back, see 'E').
    // Such a Parse was sent on the belief that this batch's Close took the statement away: if
    // that Parse is skipped too, its batch's undo must know the statement stayed (found_there).
    const auto next_sync = std::find_if(pending_.begin(), pending_.end(), [](const Pending& p) {
      return p.kind == PendingKind::kSync;
    });
    const auto later = std::find_if(next_sync, pending_.end(), [&](const Pending& p) {
      return p.statement.get() == skipped.statement.get();
    });
    if (later != pending_.end()) {
      if (later->kind == PendingKind::kParse) {
        later->found_there = skipped.kind == PendingKind::kClose || exists;
      }
      continue;
    }
    if (skipped.kind == PendingKind::kParse && !exists) {
      statements_.Remove(*skipped.statement);
    } else if (skipped.kind == PendingKind::kParse || skipped.kind == PendingKind::kClose) {
      // Back in the cache, which may now be over max_prepared_statements: the next Add evicts
      // down to it.
      statements_.Adopt(std::move(skipped.statement));
    }
  }
  for (auto it = renames.rbegin(); it != renames.rend(); ++it) {
    if (it->named_here) {
      ForgetFailedName(*it);
    } else {
      RestoreSkippedName(*it);
    }
  }
  pipeline_failed_ = false;
  failed_parse_exists_ = false;
}

bool Relay::NameUnsettled(std::string_view name) const {
  // Answers of a batch that a Sync ended come; those of the batch the client is still sending
  // may not (PostgreSQL sends them at its Sync or a Flush), but PostgreSQL judges a message by
  // the ones before it in the same batch just as pgfleet does: only earlier batches count.
  bool touched = false;
  for (const Pending& p : pending_) {
    if (p.kind == PendingKind::kSync && touched) return true;
    touched = touched || ((p.named_here || p.unnamed_here) && p.client_name == name);
  }
  return false;
}

// No later batch can Parse the name meanwhile: such a Parse waits until this batch is answered
// (NameUnsettled), so the names are put back as they were, with nothing in flight to consult.
void Relay::RestoreSkippedName(const Pending& close) {
  if (client_ == nullptr || close.named == nullptr) return;
  client_->statements.try_emplace(close.client_name, close.named);
}

void Relay::ForgetFailedName(const Pending& parse) {
  if (client_ == nullptr) return;
  auto it = client_->statements.find(parse.client_name);
  if (it == client_->statements.end() || it->second != parse.named) return;
  client_->statements.erase(it);
}

void Relay::OnCopyInResponse() {
  // The COPY's command is the first Query or Execute the server has not finished (sent_). What
  // the client sent after it decides what the COPY makes of it, as PostgreSQL reads it in COPY
  // FROM STDIN mode (copyfromparse.c, CopyGetData): CopyData and Flush are taken, Sync is ignored
  // "for the convenience of client libraries (such as libpq) that may send those without noticing
  // that the command they just sent was COPY", and CopyDone/CopyFail end the COPY. So the Syncs
  // right after the command (Flush between them included) get no ReadyForQuery, and everything
  // after the client's first other message is read outside the COPY: after its CopyDone/CopyFail,
  // or after an error ended the COPY early (bad data; any other message type during COPY is a
  // protocol violation that fails it: "unexpected message type 0x%02X during COPY from stdin").
  // A client that pipelined its CopyDone/CopyFail before this CopyInResponse came is not in COPY
  // any more. A Sync after CopyData in that run is answered only if that data already failed the
  // COPY: such Syncs stay owed (kMaybeSync) until the COPY's end tells (ResolveMaybeSyncs). From
  // now on the relay keeps the client's Syncs in the COPY from the server (FromClient).
  if (maybe_syncs_) ResolveMaybeSyncs(/*copy_failed=*/true);  // a confused server
  const auto command =
      std::find_if(sent_.begin(), sent_.end(), [](uint8_t e) { return e == 'Q' || e == 'E'; });
  if (command == sent_.end()) {
    // Not the answer to anything the client sent (a confused server): assume COPY until the client
    // ends it, and owe what was owed.
    client_->in_copy_in = true;
    return;
  }
  const bool extended = *command == 'E';
  const auto run_begin = command + 1;
  const auto run_end = std::find_if(run_begin, sent_.end(),
                                    [](uint8_t e) { return e != 'S' && e != kSentCopyData; });
  client_->in_copy_in = std::find(run_end, sent_.end(), kSentCopyEnd) == sent_.end();
  const auto first_data = std::find(run_begin, run_end, kSentCopyData);
  const size_t ignored = static_cast<size_t>(first_data - run_begin);  // all Syncs
  const size_t maybe = static_cast<size_t>(std::count(first_data, run_end, 'S'));
  if (ignored == 0 && maybe == 0) return;  // nothing owed changes: later Syncs are answered
  // Owed entries (but kCopySync, which has no entry in sent_) follow sent_'s Q/S/F in order.
  const size_t owed_before =
      static_cast<size_t>(std::count_if(sent_.begin(), run_begin, IsOwedEntry));
  const size_t owed_after = static_cast<size_t>(std::count_if(run_end, sent_.end(), IsOwedEntry));
  const bool had_copy_sync = !rfq_owed_.empty() && rfq_owed_.front() == kCopySync;
  const size_t first = had_copy_sync ? 1 : 0;
  if (rfq_owed_.size() != first + owed_before + ignored + maybe + owed_after) {
    client_->in_copy_in = true;  // out of step (a confused server): leave what is owed alone
    return;
  }
  // An extended-protocol COPY's batch gets its ReadyForQuery with the client's first Sync (or
  // Query, FunctionCall) after the COPY; one already sent takes the batch's answer over, and so
  // does a Sync that may be answered, if it is.
  const bool copy_sync = (had_copy_sync || extended) && owed_after == 0 && maybe == 0;
  const auto ignored_begin = rfq_owed_.begin() + static_cast<std::ptrdiff_t>(first + owed_before);
  std::fill(ignored_begin + static_cast<std::ptrdiff_t>(ignored),
            ignored_begin + static_cast<std::ptrdiff_t>(ignored + maybe), kMaybeSync);
  rfq_owed_.erase(ignored_begin, ignored_begin + static_cast<std::ptrdiff_t>(ignored));
  if (had_copy_sync && !copy_sync) {
    rfq_owed_.pop_front();
  } else if (!had_copy_sync && copy_sync) {
    rfq_owed_.push_front(kCopySync);
  }
  if (maybe > 0) {
    maybe_syncs_ = true;
    maybe_copy_sync_ = (had_copy_sync || extended) && owed_after == 0;
    std::replace(first_data, run_end, uint8_t{'S'}, kSentMaybeSync);
  }
  sent_.erase(run_begin, first_data);
  if (!settings_.track_prepared) return;
  // With track_prepared each owed entry but kCopySync has a kSync in pending_, in the same order.
  size_t sync = 0;
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i].kind == PendingKind::kSync) {
      const size_t index = sync++;
      if (index >= owed_before && index < owed_before + ignored) continue;
    }
    if (kept != i) pending_[kept] = std::move(pending_[i]);
    ++kept;
  }
  pending_.resize(kept);
}

void Relay::ResolveMaybeSyncs(bool copy_failed) {
  maybe_syncs_ = false;
  if (copy_failed) {
    // Whether the data before each of them had failed the COPY already cannot be told: they stay
    // owed. One that PostgreSQL ignored holds the server until it is closed; never released with
    // an answer still to come.
    std::replace(rfq_owed_.begin(), rfq_owed_.end(), kMaybeSync, uint8_t{'S'});
    std::replace(sent_.begin(), sent_.end(), kSentMaybeSync, uint8_t{'S'});
    return;
  }
  // The COPY ended without an error: PostgreSQL read them all inside it and ignored them.
  absl::InlinedVector<size_t, 4> dropped;  // their indexes among the kSyncs in pending_
  size_t index = 0;
  size_t kept = 0;
  std::optional<size_t> at;  // where the first of them was
  for (size_t i = 0; i < rfq_owed_.size(); ++i) {
    const uint8_t e = rfq_owed_[i];
    if (e == kCopySync) {
      rfq_owed_[kept++] = e;
      continue;
    }
    if (e == kMaybeSync) {
      dropped.push_back(index++);
      if (!at) at = kept;
      continue;
    }
    ++index;
    rfq_owed_[kept++] = e;
  }
  rfq_owed_.resize(kept);
  // An extended COPY's batch answer comes with the first Sync (or Query, FunctionCall) after it.
  if (maybe_copy_sync_ && at && *at == rfq_owed_.size()) rfq_owed_.push_back(kCopySync);
  sent_.erase(std::remove(sent_.begin(), sent_.end(), kSentMaybeSync), sent_.end());
  if (!settings_.track_prepared) return;
  size_t sync = 0;
  kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i].kind == PendingKind::kSync && absl::c_linear_search(dropped, sync++)) continue;
    if (kept != i) pending_[kept] = std::move(pending_[i]);
    ++kept;
  }
  pending_.resize(kept);
}

void Relay::OnServerProgress(uint8_t type) {
  // The client's messages the server has now finished with leave sent_.
  const auto is_owed = IsOwedEntry;
  if (type == 'Z') {
    // kCopySync's answer was owed for a Sync that sent_ no longer holds.
    if (rfq_owed_.empty() || rfq_owed_.front() == kCopySync) return;
    const auto owed = std::find_if(sent_.begin(), sent_.end(), is_owed);
    sent_.erase(sent_.begin(), owed == sent_.end() ? owed : owed + 1);
    return;
  }
  // CommandComplete, EmptyQueryResponse, PortalSuspended: the end of an Execute, or of one of a
  // simple Query's statements (that Query is finished by its ReadyForQuery).
  const auto next =
      std::find_if(sent_.begin(), sent_.end(), [&](uint8_t e) { return e == 'E' || is_owed(e); });
  if (next != sent_.end() && *next == 'E') sent_.erase(sent_.begin(), next + 1);
}

bool Relay::OnBackendMessage(uint8_t type, std::span<const uint8_t> body, RelayObserver& observer) {
  const bool hidden = hidden_rfq_ > 0;
  const bool pass =
      hidden || (pending_.empty() && !pipeline_failed_) || OnPendingResponse(type, body);
  if (type == 'C' && !body.empty()) {
    // DISCARD ALL / DEALLOCATE ALL drop every prepared statement on the server.
    auto tag = protocol::ParseCommandComplete(body);
    if (tag.ok() && (*tag == "DISCARD ALL" || *tag == "DEALLOCATE ALL")) {
      statements_.Clear();
      if (client_ != nullptr && !hidden) client_->statements.clear();
    }
    if (tag.ok() && *tag == "DISCARD ALL" && hidden) {
      // pgfleet's reset after a pinned client left: nothing of any client is left on it.
      applied_.clear();
      session_reset_required_ = false;
    }
  }
  switch (type) {
    case 'Z': {
      auto status = protocol::ParseReadyForQuery(body);
      if (status.ok()) tx_status_ = *status;
      statements_answered_ = 0;
      if (hidden_rfq_ > 0) {
        --hidden_rfq_;
        return false;
      }
      if (!staged_.empty() || !tx_effects_.empty()) OnSessionServerMessage(type, body);
      if (maybe_syncs_) ResolveMaybeSyncs(/*copy_failed=*/true);  // a confused server
      OnServerProgress(type);
      if (!rfq_owed_.empty()) rfq_owed_.pop_front();
      if (client_ != nullptr) {
        observer.OnQueryAnswered();
        if (tx_status_ == 'I') observer.OnTransactionEnded();
      }
      return client_ != nullptr && pass;
    }
    case 'S':
      TrackParameterStatus(body, observer);
      return !hidden && client_ != nullptr;
    case 'C':
    case 'I':
    case 's':
      if (!hidden && type == 'C' && (!tx_effects_.empty() || !staged_.empty())) {
        OnSessionServerMessage(type, body);
      }
      if (!hidden) {
        ++statements_answered_;
        // The first end of a statement after a CopyInResponse is the COPY's: it succeeded.
        if (maybe_syncs_) ResolveMaybeSyncs(/*copy_failed=*/false);
        OnServerProgress(type);
      }
      break;
    case 'D':
      if (watch_try_lock_rows_ && !hidden) OnTryLockRow(body);
      break;
    case 'G':
      if (client_ != nullptr && !hidden) {
        OnCopyInResponse();
      }
      break;
    case 'E': {
      auto fields = protocol::ParseErrorFields(body);
      if (settings_.statements != nullptr && fields.ok() &&
          IsStaleStatementError(fields->sqlstate, fields->message, fields->routine)) {
        // DDL made around pgfleet (or not seen as such): the statements prepared so far may be
        // stale, so Parses from now on are analysed afresh. The client gets the error, as
        // PostgreSQL gives it for its own statement prepared before the DDL.
        settings_.statements->SchemaChanged();
      }
      if (hidden) {
        observer.OnHiddenQueryFailed(fields.ok() ? fields->message : "malformed");
        return false;
      }
      if (!replacement_.empty()) {
        // Counted as the error the client gets.
        fields =
            protocol::ParseErrorFields(base::AsBytes(replacement_).subspan(protocol::kHeaderSize));
      }
      observer.OnServerError(fields.ok() ? fields->sqlstate : std::string_view());
      if (!staged_.empty()) OnSessionServerMessage(type, body);
      if (maybe_syncs_) ResolveMaybeSyncs(/*copy_failed=*/true);
      break;
    }
    default:
      break;
  }
  return !hidden && client_ != nullptr && pass;
}

}  // namespace pgfleet::pool
