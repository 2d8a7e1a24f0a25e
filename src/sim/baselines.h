// The baselines: simple cost models run on the same fault trace as the
// bulwark arm, disclosed in docs/simulator.md. Neither has standbys,
// in-memory checkpoints or a stack analyzer; both checkpoint to durable
// storage every costs.durable_interval, blocking costs.durable_write.
//
//  * requeue: every fault stops the job, gives its machines back and
//    acquires them again cold (costs.requeue), then restarts from the last
//    durable checkpoint.
//  * torchelastic: crashes restart every rank in place; a machine fault waits
//    for one machine to be rescheduled (costs.reschedule); both restore the
//    last durable checkpoint. Machine downs and dead links are seen by the
//    collective timeout, hangs by the NCCL watchdog.
//
// Progress is tracked in training time: a fault throws away what was done
// since the last checkpoint, and ETTR is the high-water progress over the
// wall time, as in Meta's model (closed_form below).
#pragma once

#include "sim/config.h"
#include "sim/result.h"

namespace bulwark::sim {

enum class Baseline { kRequeue, kTorchElastic };

// Reads the fault trace of `config` again and returns the arm's figures.
ArmResult RunBaseline(const SimConfig& config, Baseline which);

// Meta's closed form (HPCA'25, arXiv 2410.21680):
//   E[ETTR] ~ (1 - N r_f (u0 + dt/2)) / (1 + w/dt)
// N r_f: failures per second of the whole job; u0: restart overhead, dt the
// checkpoint interval and w its blocking write, all in seconds.
double ClosedFormEttr(double failures_per_second, double u0, double dt, double w);

}  // namespace bulwark::sim
