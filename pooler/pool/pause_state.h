// Which databases the admin console paused (PAUSE [db], KILL db), so a pool created while its
// database is paused starts paused too. With a pod, the pauses in force are recorded in the pod's
// shared region as well, so that a worker that starts or restarts (after a crash) while they are
// in force starts paused, as its siblings are. Loop thread only.
#pragma once

#include <string>

#include "absl/container/flat_hash_set.h"
#include "pooler/budget/pod_server_counts.h"

namespace pgfleet::pool {

class PauseState {
 public:
  // Takes over the pauses the pod has in force, and records this worker's from now on.
  void AttachPod(budget::PodServerCounts* pod) {
    pod_ = pod;
    const budget::PodServerCounts::Paused recorded = pod_->RecordedPauses();
    all_ = all_ || recorded.all;
    databases_.insert(recorded.databases.begin(), recorded.databases.end());
  }
  // `database` empty = every database.
  void Pause(const std::string& database) {
    if (database.empty()) {
      all_ = true;
    } else {
      databases_.insert(database);
    }
    if (pod_ != nullptr) pod_->RecordPause(database, true);
  }
  void Resume(const std::string& database) {
    if (database.empty()) {
      all_ = false;
      databases_.clear();
    } else {
      databases_.erase(database);
    }
    if (pod_ != nullptr) pod_->RecordPause(database, false);
  }
  // True after PAUSE without a database name (until RESUME without one).
  bool all() const { return all_; }
  bool IsPaused(const std::string& database) const { return all_ || databases_.contains(database); }

 private:
  bool all_ = false;
  absl::flat_hash_set<std::string> databases_;
  budget::PodServerCounts* pod_ = nullptr;
};

}  // namespace pgfleet::pool
