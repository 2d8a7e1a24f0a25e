// The agent: one per machine. It registers with the controller, reports a
// heartbeat with its observations about once a second, and carries out the
// controller's commands: start the job's ranks, stop them, emulate a fault.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "agent/clock.h"
#include "common/status.h"

namespace bulwark::agent {

struct AgentOptions {
  std::string dir;      // the cluster directory (cluster/layout.h)
  // Every controller's address, "a,b" (--controller); "": the cluster
  // directory's list (cluster/controllers.h).
  std::string controllers;
  std::string machine;  // this machine's id
  // A signature table to use instead of the built-in one ("": built in).
  std::string builtin_signatures;
  // GET /metrics on 127.0.0.1: this port, or with -1 the one recorded by an
  // earlier start, else any free one (agent_metrics.h).
  int metrics_port = -1;
  // This machine's network interface, watched through the kernel
  // (net_link.h); "": the emulated link file of the local backend.
  std::string nic;
  // This machine's own address (a network namespace of the local backend,
  // or a host of its own): the shard server and metrics listen there and a
  // rendezvous led by this machine is reached there. "": 127.0.0.1.
  std::string address;
  // Its failure domain (the rack whose switch it hangs under, "r1"), told
  // to the controller at registration; "": none.
  std::string domain;
  // Fencing (docs/control-plane.md): with no report through to the
  // controller for this long, counted from the sending of the last one that
  // went through, the agent stops its ranks and withholds its checkpoint
  // copies. The controller's heartbeat timeout must exceed it (`bulwark
  // controller --fence-timeout`), so that a machine it counts as dead has
  // certainly stopped. 0: never.
  std::chrono::milliseconds fence_timeout{0};
  // The clock of the agent's timing rules (clock.h); null: the wall clock.
  std::shared_ptr<const AgentClock> clock;
};

// Runs until SIGTERM/SIGINT (ranks are stopped) or until a machine-down
// injection kills the process outright.
Status RunAgent(const AgentOptions& options);

}  // namespace bulwark::agent
