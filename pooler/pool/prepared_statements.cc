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
