// Prepared statement registry and per-server LRU.
#include "pooler/relay/prepared_statements.h"

#include <openssl/evp.h>

#include <array>
#include <utility>

#include "pooler/base/check.h"
#include "pooler/base/strings.h"

namespace pgfleet::pool {

std::string StatementServerName(std::string_view parse_tail, uint64_t epoch) {
  // The name stands for the content on every server, shared by all clients: if two tails could
  // share a name, a client could craft a statement whose name is another client's and have that
  // client's Bind run it (or run the other's under its own). 128 bits of SHA-256 make that
  // infeasible: no way to find a second preimage or any collision is known, and a birthday search
  // needs about 2^64 hashes. 8 + 32 characters also fit PostgreSQL's NAMEDATALEN (63).
  std::array<unsigned char, 32> digest;
  unsigned int len = 0;
  PGFLEET_CHECK(EVP_Digest(parse_tail.data(), parse_tail.size(), digest.data(), &len, EVP_sha256(),
                           nullptr) == 1 &&
                len == digest.size());
  constexpr char kHex[] = "0123456789abcdef";
  std::string name = "pgfleet_";
  for (size_t i = 0; i < 16; ++i) {
    name.push_back(kHex[digest[i] >> 4]);
    name.push_back(kHex[digest[i] & 0xf]);
  }
  if (epoch != 0) base::StrAppend(&name, "_", epoch);
  return name;
}

bool IsStaleStatementError(std::string_view sqlstate, std::string_view message,
                           std::string_view routine) {
  if (sqlstate == "0A000") {
    return routine == "RevalidateCachedQuery" ||
           (routine.empty() && message == "cached plan must not change result type");
  }
  // elog's internal errors are never translated.
  return sqlstate == "XX000" && message.starts_with("cache lookup failed");
}

StatementPtr StatementRegistry::Intern(std::string_view parse_tail) {
  return InternAt(parse_tail, epoch());
}

StatementPtr StatementRegistry::InternAt(std::string_view parse_tail, uint64_t epoch) {
  auto it = by_tail_.find(base::Av(parse_tail));
  if (it != by_tail_.end()) {
    if (auto existing = it->second.lock(); existing != nullptr && existing->epoch == epoch) {
      return existing;
    }
  }
  // Every worker of the pod names the statement of a text in one epoch alike. Another epoch's (a
  // server moved in from a sibling has it) stays the server's and is never handed to a Parse.
  return Make(std::string(parse_tail), epoch, /*intern=*/epoch == this->epoch());
}

void StatementRegistry::SchemaChanged() {
  epoch_->fetch_add(1, std::memory_order_acq_rel);
  ++counters_.schema_changes;
  if (notify_) notify_();
}

void StatementRegistry::OnRemoteSchemaChange() { epoch_->fetch_add(1, std::memory_order_acq_rel); }

StatementPtr StatementRegistry::Make(std::string key, uint64_t epoch, bool intern) {
  auto statement = std::make_shared<PreparedStatement>();
  statement->server_name = StatementServerName(key, epoch);
  statement->parse_tail = key;
  statement->epoch = epoch;
  if (!intern) return statement;
  by_tail_[std::move(key)] = statement;
  // Forget entries nobody holds any more (amortised: every 64 new entries past 64).
  if (by_tail_.size() > 64 && by_tail_.size() % 64 == 0) {
    absl::erase_if(by_tail_, [](const auto& kv) { return kv.second.expired(); });
  }
  return statement;
}

void ServerStatementCache::Touch(const PreparedStatement& statement) {
  auto it = index_.find(statement.server_name);
  if (it == index_.end()) return;
  lru_.splice(lru_.end(), lru_, it->second);
}

std::vector<StatementPtr> ServerStatementCache::Add(StatementPtr statement, size_t capacity) {
  std::vector<StatementPtr> evicted;
  if (Contains(*statement)) {
    Touch(*statement);
    return evicted;
  }
  Adopt(std::move(statement));
  // The newest entry is at the back, so with capacity >= 1 it is never its own victim.
  while (capacity > 0 && lru_.size() > capacity) {
    index_.erase(lru_.front()->server_name);
    evicted.push_back(std::move(lru_.front()));
    lru_.pop_front();
  }
  return evicted;
}

void ServerStatementCache::Adopt(StatementPtr statement) {
  if (Contains(*statement)) {
    Touch(*statement);
    return;
  }
  lru_.push_back(std::move(statement));
  index_[lru_.back()->server_name] = std::prev(lru_.end());
}

void ServerStatementCache::Remove(const PreparedStatement& statement) {
  auto it = index_.find(statement.server_name);
  if (it == index_.end()) return;
  // Erase the index first: its key views the entry's name.
  auto entry = it->second;
  index_.erase(it);
  lru_.erase(entry);
}

void ServerStatementCache::Clear() {
  index_.clear();
  lru_.clear();
}

std::vector<StatementPtr> ServerStatementCache::InLruOrder() const {
  return {lru_.begin(), lru_.end()};
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
