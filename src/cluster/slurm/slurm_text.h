// The Slurm backend's pure half: what `bulwark up` records about the
// allocation (DIR/backend.json), the command lines it runs, and parsers for
// what scontrol, squeue and sbatch print. No processes here; tests feed these
// the text real Slurm 22.05 printed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::cluster {

// What `bulwark up --backend slurm` found and decided; the controller reads
// it at every start.
struct SlurmRecord {
  std::string job;                      // the allocation's job id (SLURM_JOB_ID)
  std::string batch_host;               // the node `up` ran on; it cannot leave the allocation
  std::vector<std::string> allocation;  // the allocation's nodes at `up`
  std::vector<std::string> agents;      // the nodes `up` started agents on; the rest are spare
  int grow = 0;                         // at most this many more nodes from new Slurm jobs
  std::string bulwark;                  // absolute path of the bulwark binary (same on every node)
  std::string dir;                      // absolute cluster directory (on a file system every node shares)
  // node -> its leaf switch (slurm_topology.h), for the allocation's nodes
  // that Slurm's topology places; each agent registers it as its domain.
  // Empty: the cluster has no tree topology (topology/flat), no domains.
  std::map<std::string, std::string> domains;
};

std::string EncodeSlurmRecord(const SlurmRecord& r);
Result<SlurmRecord> DecodeSlurmRecord(const std::string& text);

// One node as `scontrol show node -o NAME` prints it.
struct SlurmNode {
  std::string name;
  std::string state;   // "IDLE+DRAIN", "ALLOCATED", "DOWN+DRAIN+NOT_RESPONDING", ...
  bool drain = false;  // the DRAIN flag: draining or drained
  std::string reason;  // without the "[user@time]" Slurm appends
};
Result<SlurmNode> ParseNodeLine(const std::string& text);

// Non-empty lines, trimmed: `scontrol show hostnames`, `squeue -o %N`.
std::vector<std::string> ParseLines(const std::string& text);

// `sbatch --parsable` prints "123" or "123;cluster".
Result<std::string> ParseSubmittedJob(const std::string& text);

// `squeue -s -h -o %i|%j`: the steps of a job, "12.3|bulwark-agent".
struct SlurmStep {
  std::string id, name;
};
std::vector<SlurmStep> ParseSteps(const std::string& text);

// Every reason bulwark gives starts with this, so that bulwark resumes only
// the nodes it drained and leaves an administrator's drains alone.
inline constexpr const char* kReasonPrefix = "bulwark";
// `reason` as a node's Reason: one line, prefixed, at most 200 characters.
std::string DrainReason(const std::string& reason);
bool DrainedByBulwark(const SlurmNode& node);

// The step name of every agent, so `down` finds them among the job's steps.
inline constexpr const char* kAgentStepName = "bulwark-agent";

// srun that starts `node`'s agent as a step of the allocation. --overlap:
// agents share their node with the batch script and with each other's
// restarts instead of waiting for its CPUs. --domain: its leaf switch,
// when the record knows it (also for AgentJobArgv's named node).
std::vector<std::string> AgentStepArgv(const SlurmRecord& r, const std::string& node);
// sbatch for a new one-node job whose batch script is an agent: on `node`
// when not empty, else wherever Slurm has room. The agent names its machine
// after the node it lands on ($SLURMD_NODENAME).
std::vector<std::string> AgentJobArgv(const SlurmRecord& r, const std::string& log, const std::string& node);

// `scontrol update` lines.
std::vector<std::string> DrainArgv(const std::string& node, const std::string& reason);
std::vector<std::string> ResumeArgv(const std::string& node);
// Shrinks job `job` to `keep` (a comma-separated node list).
std::vector<std::string> ShrinkArgv(const std::string& job, const std::vector<std::string>& keep);

}  // namespace bulwark::cluster
