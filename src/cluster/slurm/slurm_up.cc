#include "cluster/slurm/slurm_up.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "cluster/local/local_cluster.h"
#include "cluster/slurm/slurm_topology.h"
#include "common/files.h"

namespace bulwark::cluster {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// The allocation's nodes' leaf switches (issue 38), as the tree topology
// plugin knows them. None when scontrol prints no topology (topology/flat,
// the default) or cannot be read: the agents then register no domain, and
// each machine's loss is its own fault, as before.
std::map<std::string, std::string> AllocationDomains(CommandRunner& run, const std::vector<std::string>& nodes) {
  CommandResult c = run.Run({"scontrol", "show", "topology"}, 30);
  if (!c.ok()) return {};
  Result<std::map<std::string, std::string>> leaf = LeafSwitches(c.out);
  if (!leaf.ok()) return {};
  std::map<std::string, std::string> out;
  for (const std::string& n : nodes) {
    if (auto it = leaf->find(n); it != leaf->end()) out[n] = it->second;
  }
  return out;
}

}  // namespace

bool InSlurmAllocation() { return !Env("SLURM_JOB_ID").empty() && !Env("SLURM_JOB_NODELIST").empty(); }

Result<SlurmRecord> PlanSlurmUp(CommandRunner& run, const SlurmUpRequest& req) {
  SlurmRecord r;
  r.job = Env("SLURM_JOB_ID");
  const std::string list = Env("SLURM_JOB_NODELIST");
  const std::string& what = req.command;
  if (!InSlurmAllocation()) {
    return Status::FailedPrecondition(
        what + ": not inside a Slurm allocation (SLURM_JOB_ID is unset); run it from an sbatch script or under "
        "salloc, e.g. 'salloc -N 3 --no-kill bulwark " + (what == "run" ? "run ... -- COMMAND" : what) +
        "' (docs/slurm.md)");
  }
  if (req.bulwark.find('\'') != std::string::npos || req.dir.find('\'') != std::string::npos) {
    return Status::InvalidArgument(what + ": the binary's path and --dir must not contain a single quote");
  }
  const std::vector<std::string> argv = {"scontrol", "show", "hostnames", list};
  CommandResult c = run.Run(argv, 30);
  if (!c.ok()) return Status::Unavailable(what + ": " + c.Describe(argv) + "; is Slurm reachable (SLURM_CONF)?");
  r.allocation = ParseLines(c.out);
  r.batch_host = Env("SLURMD_NODENAME");  // unset under salloc on a login node: no node is special
  const int nodes = static_cast<int>(r.allocation.size());
  const int machines = req.machines > 0 ? req.machines : nodes - req.standby;
  if (machines <= 0 || req.standby < 0 || req.grow < 0 || machines + req.standby > nodes) {
    return Status::InvalidArgument(what + ": --machines " + std::to_string(machines) + " and --standby " +
                                   std::to_string(req.standby) + " need " + std::to_string(machines + req.standby) +
                                   " nodes, but job " + r.job + " has " + std::to_string(nodes) + " (" + list +
                                   "); allocate more nodes (sbatch -N) or ask for fewer");
  }
  r.agents.assign(r.allocation.begin(), r.allocation.begin() + machines + req.standby);
  r.domains = AllocationDomains(run, r.allocation);
  r.grow = req.grow;
  r.bulwark = req.bulwark;
  r.dir = req.dir;
  return r;
}

Result<std::string> ControllerHost(const std::string& requested) {
  std::string host = requested;
  if (host.empty()) {
    char name[256] = {0};
    if (::gethostname(name, sizeof name - 1) != 0) {
      return Status::FailedPrecondition("up --backend slurm: cannot read this host's name; pass --listen ADDRESS");
    }
    host = name;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (rc != 0) {
    return Status::InvalidArgument("up --backend slurm: the controller's host '" + host + "' does not resolve (" +
                                   ::gai_strerror(rc) + "); pass --listen with a name or address the nodes reach");
  }
  return host;
}

Status LaunchSlurmAgents(const Layout& layout, const SlurmRecord& record) {
  for (const std::string& node : record.agents) {
    BULWARK_RETURN_IF_ERROR(MakeDirs(layout.machine(node)));
    BULWARK_RETURN_IF_ERROR(SpawnCommandDetached(AgentStepArgv(record, node), layout.agent_log(node)));
  }
  return Status::OK();
}

Result<int> StopSlurmAgents(const Layout& layout, CommandRunner& run) {
  Result<std::string> text = ReadFile(layout.backend());
  if (!text.ok()) return text.status();
  Result<SlurmRecord> record = DecodeSlurmRecord(*text);
  if (!record.ok()) return record.status();
  std::vector<std::string> cancel;
  const std::vector<std::string> steps = {"squeue", "--noheader", "--steps", "--jobs=" + record->job, "--format=%i|%j"};
  CommandResult c = run.Run(steps, 30);
  if (c.ok()) {
    for (const SlurmStep& s : ParseSteps(c.out)) {
      if (s.name == kAgentStepName) cancel.push_back(s.id);
    }
  }
  if (Result<std::string> jobs = ReadFile(layout.slurm_jobs()); jobs.ok()) {
    for (const std::string& line : ParseLines(*jobs)) cancel.push_back(line.substr(0, line.find(' ')));
  }
  if (cancel.empty()) return 0;
  std::vector<std::string> argv = {"scancel"};
  argv.insert(argv.end(), cancel.begin(), cancel.end());
  // scancel fails for jobs already gone; the rest are cancelled all the same.
  run.Run(argv, 30);
  return static_cast<int>(cancel.size());
}

}  // namespace bulwark::cluster
