// Where everything of a local cluster lives on disk: the one place that
// builds these names (the controller, the agents and the CLI all use it).
//
//   DIR/token                 cluster token (0600)
//   DIR/controller.addr       host:port the controller serves on
//   DIR/controllers.addr      every controller's host:port, one a line (up --ha; cluster/controllers.h)
//   DIR/controller.db         SQLite state
//   DIR/controller.{pid,log}
//   DIR/controller.metrics    URL of the controller's Prometheus endpoint
//   DIR/controller.metrics.json  the same as a Prometheus file_sd target list
//   DIR/metrics.d/agent-ID.json  each agent's file_sd target list: one file per agent
//                                (no two writers), in one directory (file_sd globs
//                                only the last path segment)
//   DIR/machines/ID/agent.{pid,log}
//   DIR/machines/ID/agent.metrics        URL of the agent's Prometheus endpoint
//   DIR/machines/ID/ranks/rank-R.log     each rank's stdout and stderr
//   DIR/machines/ID/ranks/rank-R.pid
//   DIR/machines/ID/health/device        emulated device health ("ok" or an error)
//   DIR/machines/ID/health/nic           emulated link state ("up", "down", "down until MS")
//   DIR/machines/ID/health/{alu,link}    emulated ALU and link (cluster/local/emulated_hardware.h)
//   DIR/durable/JOB/                     checkpoint shards persisted every persist_every steps
//   DIR/backend.json                     the cluster manager `up` used, if not local (cluster/backend.h)
//   DIR/netns.json                       the machines' network namespaces, if any (cluster/local/netns.h)
//   DIR/fence-timeout                    seconds an agent cut off from the controller waits before it
//                                        stops its ranks (cluster/fence.h); absent: no fencing
//   DIR/policy.json                      the policy fields `up --policy` set (controller/policy_fields.h);
//                                        absent: the shipped defaults
//   DIR/slurm/jobs                       Slurm jobs the controller submitted for more nodes (`down` cancels them)
//   DIR/slurm/agents                     spare nodes of the allocation the controller started agents on
//   DIR/slurm/job-J.log                  their output (the agent's log)
#pragma once

#include <string>

namespace bulwark::cluster {

struct Layout {
  std::string dir;

  std::string token() const { return dir + "/token"; }
  std::string controller_addr() const { return dir + "/controller.addr"; }
  std::string controllers_addr() const { return dir + "/controllers.addr"; }
  std::string controller_db() const { return dir + "/controller.db"; }
  std::string controller_pid() const { return dir + "/controller.pid"; }
  std::string controller_log() const { return dir + "/controller.log"; }
  std::string controller_metrics() const { return dir + "/controller.metrics"; }
  std::string controller_metrics_targets() const { return dir + "/controller.metrics.json"; }
  std::string signatures() const { return dir + "/signatures.tsv"; }
  std::string backend() const { return dir + "/backend.json"; }
  std::string fence_timeout() const { return dir + "/fence-timeout"; }
  std::string policy() const { return dir + "/policy.json"; }
  std::string netns() const { return dir + "/netns.json"; }
  std::string slurm() const { return dir + "/slurm"; }
  std::string slurm_jobs() const { return slurm() + "/jobs"; }
  std::string slurm_agents() const { return slurm() + "/agents"; }
  std::string machines() const { return dir + "/machines"; }
  std::string machine(const std::string& id) const { return machines() + "/" + id; }
  std::string agent_pid(const std::string& id) const { return machine(id) + "/agent.pid"; }
  std::string agent_log(const std::string& id) const { return machine(id) + "/agent.log"; }
  std::string agent_metrics(const std::string& id) const { return machine(id) + "/agent.metrics"; }
  std::string agent_metrics_targets(const std::string& id) const { return dir + "/metrics.d/agent-" + id + ".json"; }
  std::string ranks(const std::string& id) const { return machine(id) + "/ranks"; }
  std::string rank_log(const std::string& id, int rank) const {
    return ranks(id) + "/rank-" + std::to_string(rank) + ".log";
  }
  std::string health(const std::string& id) const { return machine(id) + "/health"; }
  std::string device(const std::string& id) const { return health(id) + "/device"; }
  std::string nic(const std::string& id) const { return health(id) + "/nic"; }
  // Outside machines/: persisted shards must outlive the machine that wrote them.
  std::string durable(const std::string& job) const { return dir + "/durable/" + job; }
};

}  // namespace bulwark::cluster
