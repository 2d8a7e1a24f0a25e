// The controller's gRPC services: adapters from RPCs to the Plane, plus the
// token check. `RunController` is the `bulwark controller` process.
#pragma once

#include <string>

#include "common/status.h"

namespace bulwark::controller {

struct ControllerOptions {
  std::string dir;          // the cluster directory: controller.db, token, controller.addr
  bool init = false;        // create the database (first start); otherwise it must exist
};

// Serves until SIGTERM or SIGINT. The address comes from <dir>/controller.addr
// so that a restarted controller listens where its agents look for it.
Status RunController(const ControllerOptions& options);

}  // namespace bulwark::controller
