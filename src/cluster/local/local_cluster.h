// The local backend: every machine is an agent process on this host, with
// its own directory (cluster/layout.h). This file holds the process
// mechanics of `bulwark up` and `bulwark down`; waiting for the controller
// and agents to answer is the CLI's, which speaks gRPC.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::cluster {

// Machine ids of a cluster with `total` machines: m01, m02, ...
std::vector<std::string> MachineIds(int total);

// Starts `argv` in its own session, detached from this process (it outlives
// the CLI), with stdout and stderr appended to `log`.
Status SpawnDetached(const std::vector<std::string>& argv, const std::string& log);

// True while `pid` runs: an exited process that its parent has not reaped
// yet (a zombie) is not running.
bool Running(pid_t pid);
// The pid in `pid_file` if that process is running; NotFound otherwise.
Result<pid_t> LivePid(const std::string& pid_file);

// Every process's children, by parent pid (one scan of /proc).
std::map<pid_t, std::vector<pid_t>> ChildrenByParent();
// The process `root` and all its descendants, parents before their
// children, root first.
std::vector<pid_t> ProcessTree(pid_t root, const std::map<pid_t, std::vector<pid_t>>& children);
std::vector<pid_t> ProcessTree(pid_t root);  // from a fresh scan

// A hung host: SIGSTOP to the machine's agent and everything under it (its
// ranks, spares, diagnostics), parents first so that none is reaped or
// restarted meanwhile; SIGCONT to thaw, children first. Returns how many.
Result<int> FreezeMachine(const std::string& agent_pid_file, bool freeze);

// SIGTERM to all of `pids` at once, then SIGKILL to those still alive after
// `grace_ms`; OK when they are gone.
Status Terminate(const std::vector<pid_t>& pids, int grace_ms);

}  // namespace bulwark::cluster
