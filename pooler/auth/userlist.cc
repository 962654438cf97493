// Parser for PgBouncer-style auth files.
#include "pooler/auth/userlist.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "pooler/base/strings.h"

namespace pgfleet::auth {
namespace {

// Debian's absl 20220623 is built with its own string_view (ABSL_OPTION_USE_STD_STRING_VIEW=0),
// which std::string_view does not convert to implicitly.
using base::Av;
using base::IsBlank;

void SkipBlanks(std::string_view& line) {
  while (!line.empty() && IsBlank(line.front())) line.remove_prefix(1);
}

// Reads one `"..."` field from the front of `line`, undoubling `""`, and consumes it. nullopt when
// the field does not start with a quote or is not closed on this line.
std::optional<std::string> ReadQuoted(std::string_view& line) {
  if (line.empty() || line.front() != '"') return std::nullopt;
  std::string out;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] != '"') {
      out.push_back(line[i]);
    } else if (i + 1 < line.size() && line[i + 1] == '"') {
      out.push_back('"');
      ++i;
    } else {
      line.remove_prefix(i + 1);
      return out;
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<Userlist> ParseUserlist(std::string_view text, std::string_view source_name) {
  Userlist users;
  // Line of each user's entry, to name both lines when a user appears twice.
  absl::flat_hash_map<std::string, int> first_line;
  int line_number = 0;
  for (absl::string_view piece : absl::StrSplit(Av(text), '\n')) {
    std::string_view line(piece.data(), piece.size());
    ++line_number;
    // Errors never quote the line: it holds a password.
    auto error = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(Av(source_name), ":", line_number, ": ", why));
    };
    SkipBlanks(line);
    if (line.empty() || line.front() == ';' || line.front() == '#') continue;

    std::optional<std::string> user = ReadQuoted(line);
    if (!user.has_value()) return error("expected a double-quoted user name");
    if (user->empty()) return error("empty user name");
    if (line.empty() || !IsBlank(line.front())) return error("expected blank after user name");
    SkipBlanks(line);
    std::optional<std::string> secret = ReadQuoted(line);
    if (!secret.has_value()) return error("expected a double-quoted password after the user name");
    // PgBouncer ignores further fields (old files carry a third one); they must still be separate
    // from the password, or a stray quote would silently shorten it.
    if (!line.empty() && !IsBlank(line.front())) return error("expected blank after password");

    auto [it, inserted] = first_line.try_emplace(*user, line_number);
    if (!inserted) {
      // PgBouncer lets the last entry win; in a hand-edited file a repeat is more likely a
      // mistake than an intent, so it is reported instead of guessed at.
      return error(absl::StrCat("duplicate user, first defined on line ", it->second));
    }
    users.emplace(std::move(*user), std::move(*secret));
  }
  return users;
}

absl::StatusOr<Userlist> LoadUserlistFile(const std::string& path) {
  // Plain read(2) rather than ifstream so that errors such as EISDIR surface with their errno
  // instead of reading as an empty, valid file.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open auth file ", path));
  std::string contents;
  char buffer[8192];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return absl::ErrnoToStatus(err, absl::StrCat("cannot read auth file ", path));
    }
    contents.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return ParseUserlist(contents, path);
}

}  // namespace pgfleet::auth
