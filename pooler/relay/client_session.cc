#include "pooler/relay/client_session.h"

#include <algorithm>
#include <utility>

#include "pooler/sql/statement_classifier.h"

namespace pgfleet::pool {

std::string_view PinReasonName(PinReason reason) {
  switch (reason) {
    case PinReason::kTempTable:
      return "temp_table";
    case PinReason::kPreparedStatement:
      return "prepared_statement";
    case PinReason::kAdvisoryLock:
      return "advisory_lock";
    case PinReason::kHoldCursor:
      return "hold_cursor";
    case PinReason::kListen:
      return "listen";
  }
  return "unknown";
}

void ClientSession::SetStartup(const sql::Effect& effect) {
  const SessionSetting setting{effect.apply_sql, effect.reset_sql};
  startup_[effect.name] = setting;
  settings_[effect.name] = setting;
}

void ClientSession::Apply(const sql::Effect& effect) {
  using sql::EffectKind;
  switch (effect.kind) {
    case EffectKind::kSet:
      settings_[effect.name] = SessionSetting{effect.apply_sql, effect.reset_sql};
      break;
    case EffectKind::kReset:
      if (auto startup = startup_.find(effect.name); startup != startup_.end()) {
        settings_[effect.name] = startup->second;
      } else {
        settings_.erase(effect.name);
      }
      break;
    case EffectKind::kResetAll:
      settings_ = startup_;
      break;
    case EffectKind::kDiscardAll:
      // SET SESSION AUTHORIZATION DEFAULT; RESET ALL; DEALLOCATE ALL; CLOSE ALL; UNLISTEN *;
      // SELECT pg_advisory_unlock_all(); DISCARD PLANS; DISCARD TEMP; DISCARD SEQUENCES.
      {
        const bool counted = pin_counted;  // the relay uncounts it
        std::vector<std::string> unlistens = std::move(unlistened);
        SessionSettings startup = std::move(startup_);
        *this = ClientSession();
        pin_counted = counted;
        unlistened = std::move(unlistens);
        unlistened.emplace_back();
        startup_ = std::move(startup);
        settings_ = startup_;
      }
      break;
    case EffectKind::kDiscardTemp:
      temp_objects_.clear();
      break;
    case EffectKind::kCreateTemp:
      temp_objects_.insert(effect.name);
      break;
    case EffectKind::kDrop:
      temp_objects_.erase(effect.name);
      break;
    case EffectKind::kPrepare:
      prepared_.insert(effect.name);
      break;
    case EffectKind::kDeallocate:
      prepared_.erase(effect.name);
      break;
    case EffectKind::kDeallocateAll:
      prepared_.clear();
      break;
    case EffectKind::kAdvisoryLock:
    case EffectKind::kTryAdvisoryLock:
      ++advisory_locks_;
      break;
    case EffectKind::kAdvisoryUnlock:
      advisory_locks_ = std::max(0, advisory_locks_ - 1);
      break;
    case EffectKind::kAdvisoryUnlockAll:
      advisory_locks_ = 0;
      break;
    case EffectKind::kDeclareHold:
      hold_cursors_.insert(effect.name);
      break;
    case EffectKind::kClose:
      hold_cursors_.erase(effect.name);
      break;
    case EffectKind::kCloseAll:
      hold_cursors_.clear();
      break;
    case EffectKind::kListen:
      channels_.insert(effect.name);
      break;
    case EffectKind::kUnlisten:
      channels_.erase(effect.name);
      unlistened.push_back(effect.name);
      break;
    case EffectKind::kUnlistenAll:
      channels_.clear();
      unlistened.emplace_back();
      break;
    case EffectKind::kSchemaChange:
      break;  // the schema's, not the session's (Relay::ApplySessionEffect)
  }
}

uint32_t ClientSession::pin_mask() const {
  const auto bit = [](PinReason r) { return 1u << static_cast<int>(r); };
  uint32_t mask = 0;
  if (!temp_objects_.empty()) mask |= bit(PinReason::kTempTable);
  if (!prepared_.empty()) mask |= bit(PinReason::kPreparedStatement);
  if (advisory_locks_ > 0) mask |= bit(PinReason::kAdvisoryLock);
  if (!hold_cursors_.empty()) mask |= bit(PinReason::kHoldCursor);
  if (!channels_.empty()) mask |= bit(PinReason::kListen);
  return mask;
}

std::string ClientSession::DescribePins() const {
  const uint32_t mask = pin_mask();
  std::string names;
  for (int r = 0; r < kPinReasonCount; ++r) {
    if ((mask & (1u << r)) == 0) continue;
    if (!names.empty()) names.push_back(',');
    names.append(PinReasonName(static_cast<PinReason>(r)));
  }
  return names;
}

bool ClientSession::AnyPins(const sql::Effects& effects) {
  return std::any_of(effects.begin(), effects.end(), [](const sql::Effect& e) { return e.pins(); });
}

bool BuildSessionSync(const SessionSettings& wanted, const SessionSettings& applied,
                      std::string* sql) {
  const size_t before = sql->size();
  for (const auto& [name, setting] : applied) {
    if (!wanted.contains(name)) {
      sql->append(setting.reset_sql);
      sql->append(";");
    }
  }
  for (const auto& [name, setting] : wanted) {
    auto it = applied.find(name);
    if (it == applied.end() || it->second.apply_sql != setting.apply_sql) {
      sql->append(setting.apply_sql);
      sql->append(";");
    }
  }
  return sql->size() != before;
}

void TakeStartupSettings(std::span<const protocol::StartupSetting> settings,
                         ClientSession* session) {
  for (const auto& setting : settings) {
    session->SetStartup(sql::SetConfigEffect(setting.name, setting.value));
  }
}

void CarryUnreportedStartupParams(const TrackedParamNames& names, const ParamSet& server_defaults,
                                  ParamSet* params, ClientSession* session) {
  for (size_t slot = 0; slot < params->size() && slot < names.size(); ++slot) {
    if (!params->IsSet(slot) || server_defaults.IsSet(slot)) continue;
    session->SetStartup(sql::SetConfigEffect(names.name(slot), params->Get(slot)));
    params->Clear(slot);
  }
}

}  // namespace pgfleet::pool
