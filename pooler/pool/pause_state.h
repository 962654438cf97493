// Which databases the admin console paused (PAUSE [db], KILL db), so a pool created while its
// database is paused starts paused too. Loop thread only.
#pragma once

#include <string>

#include "absl/container/flat_hash_set.h"

namespace pgfleet::pool {

class PauseState {
 public:
  // `database` empty = every database.
  void Pause(const std::string& database) {
    if (database.empty()) {
      all_ = true;
    } else {
      databases_.insert(database);
    }
  }
  void Resume(const std::string& database) {
    if (database.empty()) {
      all_ = false;
      databases_.clear();
    } else {
      databases_.erase(database);
    }
  }
  // True after PAUSE without a database name (until RESUME without one).
  bool all() const { return all_; }
  bool IsPaused(const std::string& database) const { return all_ || databases_.contains(database); }

 private:
  bool all_ = false;
  absl::flat_hash_set<std::string> databases_;
};

}  // namespace pgfleet::pool
