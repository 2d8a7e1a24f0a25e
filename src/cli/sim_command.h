// `bulwark sim`: the scale simulator (src/sim/sim.h) from the command line.
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace bulwark::cli {

// Flags: --gpus N --days D --seed S --config sim.yaml|json --json
// --report DIR --sweep scale|standby|ckpt|detect --replay demo.
Status SimCmd(const std::map<std::string, std::string>& flags);

}  // namespace bulwark::cli
