#include "controller/releases.h"

namespace bulwark::controller {

int ReleaseState::RollbackTarget() const {
  for (int r = applied - 1; r >= 1; --r) {
    if (rolled_back.count(r) == 0) return r;
  }
  return 0;
}

bool ReleaseState::RecentlyApplied(Time now, Duration window) const {
  return applied_at.has_value() && now - *applied_at <= window;
}

}  // namespace bulwark::controller
