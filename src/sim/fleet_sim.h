// The bulwark arm: a discrete-event fleet model around the real Controller.
//
// The fleet turns each fault of the trace into what its agents would send,
// at the times they would see it: explicit events (a rank's exit, a lost
// heartbeat, a NIC alert) directly, and for the implicit classes the ranks'
// step reports and stacks (signals.h), which the real detectors
// (controller::Monitors) and the real stack analyzer turn into events. It
// carries out the controller's actions with modelled costs: an eviction
// takes the machine out, a restart brings the job back after process start
// + communicator init + restore + one step, the ladder's diagnostics answer
// after their modelled time, a replenish request brings machines after the
// provisioning delay. Nothing here decides: every decision is
// Controller::Handle's.
//
// Step reports are thinned. The ledger only needs the steps that change it:
// the first step after each restart (ends recovery), the step at which
// recomputation catches up with the high-water mark (productive again), and
// the last step completed before each fault or other event (so the partial
// step in flight is what the fault throws away). Between those, the ledger's
// open segment is productive exactly as if every step had been reported, so
// a 90-day run needs a few events per fault instead of 1.5 million steps.
//
// Ordering: events due at the same virtual time are handled in the order
// they were scheduled (a sequence number breaks ties), so a run is a pure
// function of its config and seed.
#pragma once

#include "common/status.h"
#include "sim/config.h"
#include "sim/result.h"

namespace bulwark::sim {

// Runs the bulwark arm of `config`; fills result.arms[0] and result.fleet.
// InvalidArgument for a config the controller refuses (its spec or policy).
Status RunBulwark(const SimConfig& config, SimResult& result);

}  // namespace bulwark::sim
