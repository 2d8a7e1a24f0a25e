// `bulwark inject` and `bulwark machine return`: faults for a local
// cluster, and an operator handing a repaired machine back. A fault on a
// machine in a namespace (its link, a partition) and a frozen host are made
// here, outside the agent; the rest go to the machine's agent through the
// controller.
#pragma once

#include "cli/args.h"
#include "common/status.h"

namespace bulwark::cli {

Status InjectCmd(const Args& a);
Status MachineCmd(const Args& a);

}  // namespace bulwark::cli
