#include "pooler/protocol/startup_options.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "pooler/base/strings.h"

namespace pgfleet::protocol {
namespace {

std::vector<std::string> SplitOptions(std::string_view options) {
  std::vector<std::string> words;
  size_t i = 0;
  while (true) {
    while (i < options.size() && absl::ascii_isspace(static_cast<unsigned char>(options[i]))) ++i;
    if (i == options.size()) return words;
    std::string word;
    while (i < options.size() && !absl::ascii_isspace(static_cast<unsigned char>(options[i]))) {
      if (options[i] == '\\' && i + 1 < options.size()) ++i;
      word.push_back(options[i++]);
    }
    words.push_back(std::move(word));
  }
}

absl::Status Refuse(std::string_view why) {
  return absl::InvalidArgumentError(base::StrCat("unsupported options startup parameter: ", why));
}

// "name=value" after -c or --.
absl::StatusOr<StartupSetting> ParseAssignment(std::string_view flag, std::string_view text) {
  const size_t equals = text.find('=');
  if (equals == std::string_view::npos) {
    return Refuse(base::StrCat(flag, text, " requires a value"));
  }
  StartupSetting setting{std::string(text.substr(0, equals)), std::string(text.substr(equals + 1))};
  std::replace(setting.name.begin(), setting.name.end(), '-', '_');
  if (!IsSettingName(setting.name)) {
    return Refuse(base::StrCat("invalid setting name in ", flag, text));
  }
  return setting;
}

}  // namespace

bool IsSettingName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.';
  });
}

absl::StatusOr<std::vector<StartupSetting>> ParseStartupOptions(std::string_view options) {
  const std::vector<std::string> words = SplitOptions(options);
  std::vector<StartupSetting> settings;
  for (size_t i = 0; i < words.size(); ++i) {
    std::string_view word = words[i];
    absl::StatusOr<StartupSetting> setting;
    if (word.starts_with("--")) {
      setting = ParseAssignment("--", word.substr(2));
    } else if (word == "-c") {
      if (i + 1 == words.size()) return Refuse("-c requires a value");
      setting = ParseAssignment("-c ", words[++i]);
    } else if (word.starts_with("-c")) {
      setting = ParseAssignment("-c ", word.substr(2));
    } else {
      return Refuse(
          base::StrCat("only -c name=value and --name=value are supported, not \"", word, "\""));
    }
    if (!setting.ok()) return setting.status();
    settings.push_back(*std::move(setting));
  }
  return settings;
}

}  // namespace pgfleet::protocol
