// Prepared statement registry and per-server LRU.
#include "pooler/pool/prepared_statements.h"

#include "absl/strings/str_cat.h"

namespace pgfleet::pool {

StatementPtr StatementRegistry::Intern(std::string_view parse_tail) {
  std::string key(parse_tail);
  auto it = by_tail_.find(key);
  if (it != by_tail_.end()) {
    if (auto existing = it->second.lock()) return existing;
  }
  auto statement = std::make_shared<PreparedStatement>();
  statement->id = next_id_++;
  statement->server_name = absl::StrCat("pgfleet_", statement->id);
  statement->parse_tail = key;
  by_tail_[std::move(key)] = statement;
  // Forget entries no client holds any more (amortised: only when the map doubled).
  if (by_tail_.size() > 64 && by_tail_.size() % 64 == 0) {
    absl::erase_if(by_tail_, [](const auto& kv) { return kv.second.expired(); });
  }
  return statement;
}

void ServerStatementCache::Touch(uint64_t id) {
  auto it = index_.find(id);
  if (it == index_.end()) return;
  lru_.splice(lru_.end(), lru_, it->second);
}

std::optional<std::string> ServerStatementCache::Add(uint64_t id, const std::string& server_name,
                                                     size_t capacity) {
  if (Contains(id)) {
    Touch(id);
    return std::nullopt;
  }
  lru_.push_back(Entry{id, server_name});
  index_[id] = std::prev(lru_.end());
  if (capacity > 0 && lru_.size() > capacity) {
    Entry victim = lru_.front();
    index_.erase(victim.id);
    lru_.pop_front();
    return victim.server_name;
  }
  return std::nullopt;
}

void ServerStatementCache::Remove(uint64_t id) {
  auto it = index_.find(id);
  if (it == index_.end()) return;
  lru_.erase(it->second);
  index_.erase(it);
}

void ServerStatementCache::Clear() {
  lru_.clear();
  index_.clear();
}

}  // namespace pgfleet::pool

namespace pgfleet::pool {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

void SkipSpaces(std::string_view& s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
}

// Consumes `keyword` (ASCII, case-insensitive) when it is followed by a space or the end.
bool ConsumeKeyword(std::string_view& s, std::string_view keyword) {
  if (s.size() < keyword.size()) return false;
  for (size_t i = 0; i < keyword.size(); ++i) {
    char c = s[i];
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (c != keyword[i]) return false;
  }
  if (s.size() > keyword.size() && !IsSpace(s[keyword.size()])) return false;
  s.remove_prefix(keyword.size());
  return true;
}

}  // namespace

std::optional<std::string> ParseDeallocate(std::string_view sql) {
  SkipSpaces(sql);
  while (!sql.empty() && (IsSpace(sql.back()) || sql.back() == ';')) sql.remove_suffix(1);
  if (!ConsumeKeyword(sql, "DEALLOCATE")) return std::nullopt;
  SkipSpaces(sql);
  std::string_view rest = sql;
  if (ConsumeKeyword(rest, "PREPARE")) {
    SkipSpaces(rest);
    // "DEALLOCATE prepare" alone names a statement called prepare.
    if (!rest.empty()) sql = rest;
  }
  if (sql.empty()) return std::nullopt;
  std::string name;
  if (sql.front() == '"') {
    // A quoted identifier; "" inside stands for one quote.
    for (size_t i = 1; i < sql.size(); ++i) {
      if (sql[i] != '"') {
        name.push_back(sql[i]);
      } else if (i + 1 < sql.size() && sql[i + 1] == '"') {
        name.push_back('"');
        ++i;
      } else {
        return i + 1 == sql.size() && !name.empty() ? std::optional<std::string>(name)
                                                    : std::nullopt;
      }
    }
    return std::nullopt;
  }
  for (char c : sql) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '$' || static_cast<unsigned char>(c) >= 0x80;
    if (!ok) return std::nullopt;
    name.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
  }
  if (name == "all" || (name[0] >= '0' && name[0] <= '9') || name[0] == '$') return std::nullopt;
  return name;
}

}  // namespace pgfleet::pool
