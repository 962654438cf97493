// Which databases the admin console paused (PAUSE [db], KILL db), so a pool created while its
// database is paused starts paused too. With a pod, the pauses in force are recorded in the pod's
// shared region as well, so that a worker that starts or restarts (after a crash) while they are
// in force starts paused, as its siblings are. Loop thread only.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace pgfleet::pool {

class PauseState {
 public:
  // Told of every Pause and Resume from now on (the worker records them in the pod's shared
  // region, budget::PodServerCounts::RecordPause; a starting worker Pauses what is recorded there
  // before it sets this).
  void set_recorder(std::function<void(const std::string& database, bool paused)> record) {
    record_ = std::move(record);
  }
  // `database` empty = every database.
  void Pause(const std::string& database) {
    if (database.empty()) {
      all_ = true;
    } else {
      databases_.insert(database);
    }
    if (record_) record_(database, true);
  }
  void Resume(const std::string& database) {
    if (database.empty()) {
      all_ = false;
      databases_.clear();
    } else {
      databases_.erase(database);
    }
    if (record_) record_(database, false);
  }
  // DISABLE db / ENABLE db: new clients of a disabled database are refused (this worker's
  // memory: a worker restarted meanwhile accepts them until the next DISABLE).
  void Disable(const std::string& database) { disabled_.insert(database); }
  void Enable(const std::string& database) { disabled_.erase(database); }
  bool IsDisabled(const std::string& database) const { return disabled_.contains(database); }
  const absl::flat_hash_set<std::string>& disabled() const { return disabled_; }

  // True after PAUSE without a database name (until RESUME without one).
  bool all() const { return all_; }
  bool IsPaused(const std::string& database) const { return all_ || databases_.contains(database); }

 private:
  bool all_ = false;
  absl::flat_hash_set<std::string> databases_;
  absl::flat_hash_set<std::string> disabled_;
  std::function<void(const std::string&, bool)> record_;
};

}  // namespace pgfleet::pool
