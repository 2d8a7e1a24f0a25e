// Backend: what a cluster manager does for the controller. The policy
// decides that a machine is evicted, returned or that the standby pool is
// short; the plane carries that out on the agents, and tells the backend so
// that the cluster manager agrees (Slurm: the node is drained with the
// incident as its reason, resumed, more nodes are asked for).
//
// Every call returns at once: a cluster manager's command may hang or fail
// (slurmctld restarting, a slow network), and the control loop must never
// wait on it. Implementations carry requests out in the background, retry
// what failed and log what they gave up on.
//
// The local backend has no manager to tell: OpenBackend returns nullptr for
// it and the plane skips these calls.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cluster/layout.h"
#include "common/status.h"

namespace bulwark::cluster {

class Backend {
 public:
  virtual ~Backend() = default;

  // Takes `machine` out of the manager's scheduling with `reason` (it names
  // the incident), and away from this cluster's allocation, so nothing else
  // lands on it until someone has looked. A machine bulwark drained already
  // keeps its first reason: saying it again is a no-op.
  virtual void Drain(const std::string& machine, const std::string& reason) = 0;

  // Hands `machine` back to scheduling. `start_agent`: its agent is gone, so
  // start one there to run its self-check and rejoin. A machine drained by
  // someone other than bulwark is left as it is.
  virtual void Resume(const std::string& machine, bool start_agent) = 0;

  // The standby pool is `count` machines short. `request` identifies the
  // decision (the action id): a request seen before is ignored, so a replayed
  // or repeated decision asks for nothing more.
  virtual void Acquire(const std::string& request, int count) = 0;
};

using LogFn = std::function<void(const std::string&)>;

// The backend `bulwark up` recorded in DIR/backend.json, ready to run;
// nullptr when there is none (the local backend). A record that cannot be
// read is an error: the controller must not act as if on a local cluster.
Result<std::unique_ptr<Backend>> OpenBackend(const Layout& layout, LogFn log);

}  // namespace bulwark::cluster
