// The relay's stream handling and release rule (prepared statements: relay_prepared.cc).
#include "pooler/pool/relay.h"

#include <algorithm>
#include <utility>

#include "pooler/base/strings.h"
#include "pooler/protocol/backend.h"
#include "pooler/protocol/builders.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/sqlstate.h"

namespace pgfleet::pool {

Relay::Relay(const RelaySettings& settings)
    : settings_(settings), backend_(settings.max_packet_size), params_(settings.tracked->size()) {}

bool Relay::IsReleasable() const {
  return expected_rfq_ == 0 && hidden_rfq_ == 0 && tx_status_ == 'I' && !backend_.mid_message() &&
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
    size_t skip = 0;  // leading bytes of this message replaced by a rewrite
    if (settings_.track_prepared) {
      scratch_.mutable_bytes().clear();
      const Rewrite rewrite = RewritePrepared(piece, &skip, &verdict);
      if (rewrite == Rewrite::kNeedMore || rewrite == Rewrite::kReject) break;
      if (rewrite == Rewrite::kReplace && !scratch_.bytes().empty()) {
        const auto& bytes = scratch_.bytes();
        to_server.Insert({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
      }
    }
    switch (piece.header.type) {
      case 'Q':
      case 'S':
      case 'F':
        if (expected_rfq_ == 0) query_started_at_ = now;
        ++expected_rfq_;
        if (settings_.track_prepared) PushPending(PendingKind::kSync, PendingAction::kForward);
        client.unsynced = false;
        break;
      case 'E':
        if (settings_.track_prepared) PushPending(PendingKind::kExecute, PendingAction::kForward);
        client.unsynced = true;
        break;
      case 'P':
      case 'B':
      case 'D':
      case 'C':
        client.unsynced = true;
        break;
      case 'c':
      case 'f':
        verdict.copy_ended = verdict.copy_ended || client.in_copy_in;
        client.in_copy_in = false;
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
      const bool needs_body = protocol::BackendNeedsBody(piece.header.type);
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
  if (pending_.empty() || client_ == nullptr) return;
  scratch_.mutable_bytes().clear();
  if (!TakeReadyAnswers(scratch_)) return;
  const auto& bytes = scratch_.bytes();
  to_client.Insert({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

bool Relay::TakeReadyAnswers(protocol::ByteSink& to_client) {
  if (client_ == nullptr) return false;
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

void Relay::TrackParameterStatus(std::span<const uint8_t> body) {
  auto status = protocol::ParseParameterStatus(body);
  if (!status.ok()) return;
  const int slot = settings_.tracked->Find(status->name);
  if (slot < 0) return;
  params_.Set(static_cast<size_t>(slot), status->value);
  // A SET by the client (not one pgfleet injected) changes what the client wants from now on.
  if (client_ != nullptr && hidden_rfq_ == 0) {
    client_->params.Set(static_cast<size_t>(slot), status->value);
  }
}

bool Relay::OnPendingResponse(uint8_t type) {
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
      if (!pending_.empty() && pending_.front().kind == PendingKind::kExecute) pending_.pop_front();
      return true;
    case 'E':
      // The failing message is the head (unless it is a simple Query, answered by its 'Z').
      // Errors always reach the client: a failed re-Parse reports for the message that needed it.
      if (!pending_.empty() && pending_.front().kind != PendingKind::kSync) {
        const Pending head = std::move(pending_.front());
        pending_.pop_front();
        if (head.kind == PendingKind::kParse && head.statement != nullptr) {
          statements_.Remove(*head.statement);
        }
        pipeline_failed_ = true;
      }
      return true;
    case 'Z':
      if (pipeline_failed_) {
        // Everything up to the Sync was skipped: statements it would have created do not exist.
        while (!pending_.empty() && pending_.front().kind != PendingKind::kSync) {
          const Pending skipped = std::move(pending_.front());
          pending_.pop_front();
          if (skipped.kind == PendingKind::kParse && skipped.statement != nullptr) {
            statements_.Remove(*skipped.statement);
          }
        }
        pipeline_failed_ = false;
      }
      if (!pending_.empty() && pending_.front().kind == PendingKind::kSync) pending_.pop_front();
      return true;
    default:
      return true;
  }
}

bool Relay::OnBackendMessage(uint8_t type, std::span<const uint8_t> body, RelayObserver& observer) {
  const bool hidden = hidden_rfq_ > 0;
  const bool pass = hidden || (pending_.empty() && !pipeline_failed_) || OnPendingResponse(type);
  if (type == 'C' && !body.empty()) {
    // DISCARD ALL / DEALLOCATE ALL drop every prepared statement on the server.
    auto tag = protocol::ParseCommandComplete(body);
    if (tag.ok() && (*tag == "DISCARD ALL" || *tag == "DEALLOCATE ALL")) {
      statements_.Clear();
      if (client_ != nullptr && !hidden) client_->statements.clear();
    }
  }
  switch (type) {
    case 'Z': {
      auto status = protocol::ParseReadyForQuery(body);
      if (status.ok()) tx_status_ = *status;
      if (hidden_rfq_ > 0) {
        --hidden_rfq_;
        return false;
      }
      if (expected_rfq_ > 0) --expected_rfq_;
      if (client_ != nullptr) observer.OnQueryAnswered();
      return client_ != nullptr && pass;
    }
    case 'S':
      TrackParameterStatus(body);
      return !hidden && client_ != nullptr;
    case 'G':
      if (client_ != nullptr && !hidden) client_->in_copy_in = true;
      break;
    case 'E': {
      auto fields = protocol::ParseErrorFields(body);
      if (hidden) {
        observer.OnHiddenQueryFailed(fields.ok() ? fields->message : "malformed");
        return false;
      }
      observer.OnServerError(fields.ok() ? fields->sqlstate : std::string_view());
      break;
    }
    default:
      break;
  }
  return !hidden && client_ != nullptr && pass;
}

}  // namespace pgfleet::pool
