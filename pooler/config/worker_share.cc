// A worker's even share of a pod-wide number.
#include "pooler/config/worker_share.h"

namespace pgfleet::config {

int StrictShare(int total, int index, int count) {
  if (total <= 0 || count <= 1) return total;
  int share = total / count + (index < total % count ? 1 : 0);
  return share == 0 ? kNoConnections : share;
}

}  // namespace pgfleet::config
