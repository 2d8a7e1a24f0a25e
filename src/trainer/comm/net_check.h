// The network test of the stop-time ladder (docs/ladder.md): one link
// between two neighbouring machines, measured with the job's own transport.
//
//   RANK=r WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... bulwark-train --net-check [--net-timeout S]
//
// rendezvouses over Gloo like a training job, then times 8 all-reduces of a
// 4 MB float tensor (bandwidth) and 50 of one float (latency), checks every
// sum, and prints one JSON line
//   {"net_check":"ok","ms":...,"mb_per_s":...,"latency_us":...,"rank":r}
// where "ms" is the time of all timed collectives, the number the controller
// compares across links. No model, no data set: it runs for any job.
//
// Test hook (a degraded link, emulated): BULWARK_NET_SLOW=F makes this end
// wait (F-1) x each collective's time after it, inside the timed loop, so
// both ends see the link F x slower, as with a NIC renegotiated down. The
// agent sets it after `bulwark inject slow-link --factor F`.
#pragma once

#include "common/status.h"

namespace bulwark::trainer {

Status RunNetCheck(double timeout_s);

}  // namespace bulwark::trainer
