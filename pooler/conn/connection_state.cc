// The transition tables of client and server connections.
#include "pooler/conn/connection_state.h"

namespace pgfleet::pool {

std::string_view ClientStateName(ClientState state) {
  switch (state) {
    case ClientState::kStartup:
      return "startup";
    case ClientState::kAuth:
      return "auth";
    case ClientState::kAuthQuery:
      return "auth_query";
    case ClientState::kSettingsCheck:
      return "settings_check";
    case ClientState::kWelcome:
      return "welcome";
    case ClientState::kIdle:
      return "idle";
    case ClientState::kWaiting:
      return "waiting";
    case ClientState::kActive:
      return "active";
    case ClientState::kAdmin:
      return "admin";
    case ClientState::kClosed:
      return "closed";
  }
  return "unknown";
}

bool IsLegalClientMove(ClientState from, ClientState to) {
  using S = ClientState;
  // Any live client may be closed (its socket failed, a timeout, shutdown); a closed one stays.
  if (to == S::kClosed) return from != S::kClosed;
  switch (from) {
    case S::kStartup:
      // Trust logs in at once from the startup packet; auth_file users skip the auth query.
      return to == S::kAuth || to == S::kAuthQuery || to == S::kSettingsCheck ||
             to == S::kWelcome || to == S::kIdle || to == S::kAdmin;
    case S::kAuth:
      return to == S::kSettingsCheck || to == S::kWelcome || to == S::kIdle || to == S::kAdmin;
    case S::kSettingsCheck:
      return to == S::kWelcome || to == S::kIdle;
    case S::kAuthQuery:
      return to == S::kAuth;  // the secret arrived (or not): the password exchange goes on
    case S::kWelcome:
      return to == S::kIdle;
    case S::kIdle:
      return to == S::kWaiting || to == S::kActive;
    case S::kWaiting:
      // Linked, or its queued query was cancelled and nothing else is queued.
      return to == S::kActive || to == S::kIdle;
    case S::kActive:
      return to == S::kIdle;  // released, or its server went away
    case S::kAdmin:
    case S::kClosed:
      return false;
  }
  return false;
}

std::string_view ServerStateName(ServerState state) {
  switch (state) {
    case ServerState::kConnecting:
      return "connecting";
    case ServerState::kLogin:
      return "login";
    case ServerState::kIdle:
      return "idle";
    case ServerState::kActive:
      return "active";
    case ServerState::kTesting:
      return "tested";
    case ServerState::kCanceling:
      return "being_canceled";
    case ServerState::kDraining:
      return "draining";
    case ServerState::kListening:
      return "listening";
    case ServerState::kClosed:
      return "closed";
  }
  return "unknown";
}

bool IsLegalServerMove(ServerState from, ServerState to) {
  using S = ServerState;
  if (to == S::kClosed) return from != S::kClosed;
  switch (from) {
    case S::kConnecting:
      return to == S::kLogin;
    case S::kLogin:
      return to == S::kIdle;
    case S::kIdle:
      // Linked, a check query / auth_query before serving, or the LISTEN hub's.
      return to == S::kActive || to == S::kTesting || to == S::kListening;
    case S::kActive:
      // Released (idle, or held while a cancel is in flight), reset after its client left, or
      // drained after its client left mid-query.
      return to == S::kIdle || to == S::kCanceling || to == S::kTesting || to == S::kDraining;
    case S::kTesting:
      return to == S::kIdle;
    case S::kCanceling:
      return to == S::kIdle;
    case S::kDraining:
      // Clean again: back to the pool, or reset first (session mode, server_reset_query_always).
      return to == S::kIdle || to == S::kTesting;
    case S::kListening:
      // Nobody listens any more and UNLISTEN * was answered.
      return to == S::kIdle;
    case S::kClosed:
      return false;
  }
  return false;
}

}  // namespace pgfleet::pool
