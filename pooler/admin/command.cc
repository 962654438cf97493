// Admin console command parsing.
#include "pooler/admin/command.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "pooler/base/strings.h"

namespace pgfleet::admin {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Splits on whitespace; a double-quoted token keeps its spaces and loses its quotes ("" = ").
bool Tokenize(std::string_view text, std::vector<std::string>* tokens) {
  size_t i = 0;
  while (i < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    std::string token;
    if (text[i] == '"') {
      ++i;
      bool closed = false;
      while (i < text.size()) {
        if (text[i] == '"') {
          if (i + 1 < text.size() && text[i + 1] == '"') {
            token.push_back('"');
            i += 2;
            continue;
          }
          ++i;
          closed = true;
          break;
        }
        token.push_back(text[i++]);
      }
      if (!closed) return false;
    } else {
      while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) {
        token.push_back(text[i++]);
      }
    }
    tokens->push_back(std::move(token));
  }
  return true;
}

std::string_view Stripped(std::string_view s) {
  const absl::string_view stripped = absl::StripAsciiWhitespace(base::Av(s));
  return {stripped.data(), stripped.size()};
}

// SET key = value | SET key TO value, after "SET "; the value may be 'quoted' ('' for a quote).
bool ParseSet(std::string_view rest, Command* command) {
  size_t equals = rest.find('=');
  size_t value_at = equals + 1;
  if (equals == std::string_view::npos) {
    equals = Lower(rest).find(" to ");
    value_at = equals + 4;
  }
  if (equals == std::string_view::npos) return false;
  const std::string_view key = Stripped(rest.substr(0, equals));
  const std::string_view value = Stripped(rest.substr(value_at));
  if (key.empty() || key.find_first_of(" \t'\"") != std::string_view::npos) return false;
  command->verb = Verb::kSet;
  command->setting = Lower(key);
  const bool quoted = value.size() >= 2 && value.front() == '\'' && value.back() == '\'';
  command->value =
      quoted ? absl::StrReplaceAll(base::Av(value.substr(1, value.size() - 2)), {{"''", "'"}})
             : std::string(value);
  return true;
}

absl::Status Invalid(std::string_view sql) {
  return absl::InvalidArgumentError(base::StrCat("invalid command '", sql, "', use SHOW HELP;"));
}

}  // namespace

absl::StatusOr<Command> ParseCommand(std::string_view sql) {
  std::string_view text = sql;
  auto trim = [&text] {
    while (!text.empty() &&
           (std::isspace(static_cast<unsigned char>(text.back())) || text.back() == ';')) {
      text.remove_suffix(1);
    }
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
      text.remove_prefix(1);
    }
  };
  trim();
  Command command;
  if (text.empty()) return command;
  if (text.size() > 4 && Lower(text.substr(0, 4)) == "set ") {
    if (!ParseSet(text.substr(4), &command)) return Invalid(text);
    return command;
  }
  std::vector<std::string> tokens;
  if (!Tokenize(text, &tokens) || tokens.empty()) return Invalid(text);
  const std::string verb = Lower(tokens[0]);
  const size_t args = tokens.size() - 1;
  auto optional_db = [&](Verb v) -> absl::StatusOr<Command> {
    if (args > 1) return Invalid(text);
    command.verb = v;
    if (args == 1) command.database = tokens[1];
    return command;
  };
  if (verb == "show") {
    if (args != 1) return Invalid(text);
    command.verb = Verb::kShow;
    command.what = Lower(tokens[1]);
    if (std::find(std::begin(kShowSubjects), std::end(kShowSubjects), command.what) ==
        std::end(kShowSubjects)) {
      return Invalid(text);
    }
    return command;
  }
  if (verb == "pause") return optional_db(Verb::kPause);
  if (verb == "resume") return optional_db(Verb::kResume);
  if (verb == "reconnect") return optional_db(Verb::kReconnect);
  if (verb == "wait_close") return optional_db(Verb::kWaitClose);
  if (verb == "kill") return optional_db(Verb::kKill);
  if ((verb == "disable" || verb == "enable") && args == 1) {
    command.verb = verb == "disable" ? Verb::kDisable : Verb::kEnable;
    command.database = tokens[1];
    return command;
  }
  if (verb == "kill_client" && args == 1) {
    if (!absl::SimpleAtoi(base::Av(tokens[1]), &command.client_id)) return Invalid(text);
    command.verb = Verb::kKillClient;
    return command;
  }
  if (verb == "suspend" && args == 0) {
    command.verb = Verb::kSuspend;
    return command;
  }
  if (verb == "reload" && args == 0) {
    command.verb = Verb::kReload;
    return command;
  }
  if (verb == "shutdown" && args <= 1) {
    command.verb = Verb::kShutdown;
    if (args == 1) {
      const std::string mode = Lower(tokens[1]);
      if (mode == "wait_for_servers") {
        command.shutdown = ShutdownMode::kWaitForServers;
      } else if (mode == "wait_for_clients") {
        command.shutdown = ShutdownMode::kWaitForClients;
      } else {
        return Invalid(text);
      }
    }
    return command;
  }
  return Invalid(text);
}

bool NeedsAdmin(Verb verb) { return verb != Verb::kShow && verb != Verb::kEmpty; }

std::string_view CommandTag(Verb verb) {
  switch (verb) {
    case Verb::kEmpty:
      return "";
    case Verb::kShow:
      return "SHOW";
    case Verb::kPause:
      return "PAUSE";
    case Verb::kResume:
      return "RESUME";
    case Verb::kReconnect:
      return "RECONNECT";
    case Verb::kKill:
      return "KILL";
    case Verb::kReload:
      return "RELOAD";
    case Verb::kShutdown:
      return "SHUTDOWN";
    case Verb::kWaitClose:
      return "WAIT_CLOSE";
    case Verb::kKillClient:
      return "KILL_CLIENT";
    case Verb::kDisable:
      return "DISABLE";
    case Verb::kEnable:
      return "ENABLE";
    case Verb::kSuspend:
      return "SUSPEND";
    case Verb::kSet:
      return "SET";
  }
  return "";
}

}  // namespace pgfleet::admin
