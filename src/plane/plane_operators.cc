// The plane's operator requests: submitting the job, emulated fault
// injection on the local backend, and handing a repaired machine back.
#include <fstream>
#include <iterator>
#include <random>

#include "cluster/local/emulator.h"
#include "controller/policy_fields.h"
#include "plane/codec.h"
#include "plane/plane.h"

namespace bulwark::plane {

using nlohmann::json;

Status Plane::ApplyJobPolicyLocked(const JobLaunch& launch) {
  PolicyConfig p = cluster_policy_;
  if (Status s = controller::ApplyPolicyValues(launch.policy, &p); !s.ok()) {
    return Status::InvalidArgument("job " + launch.spec.id + ": " + s.message());
  }
  options_.policy = p;
  monitors_ = std::make_unique<Monitors>(options_.policy);
  if (launch.policy.empty()) return Status::OK();
  PolicyConfig own;  // the job's fields alone, as the file gave them
  (void)controller::ApplyPolicyValues(launch.policy, &own);
  LogLocked("job " + launch.spec.id + " policy: " + controller::DescribePolicy(controller::ChangedPolicy(own)));
  return Status::OK();
}

namespace {

// Elastic recovery restarts the survivors at a narrower width and keeps
// their state: only ranks that speak an elastic protocol can. bulwark-train
// does (trainer/step/elastic.h), and so does a Python script that trains
// through bulwark.elastic (python/bulwark/elastic.py). Any other program
// would restart at the new width, find no checkpoint of its own width and
// train again from step 0, in silence; it is refused here, at submit,
// instead. A script is known by its text: the controller reads the file
// the ranks will run (a local or shared path, as the agents need it too).
bool UsesBulwarkElastic(const std::string& text) {
  for (const char* use : {"bulwark.elastic", "from bulwark import elastic"}) {
    if (text.find(use) != std::string::npos) return true;
  }
  return false;
}

// The script a Python interpreter runs: its first argument that is not an
// option ("" for -c or -m, which name no file).
std::string PythonScript(const std::vector<std::string>& argv) {
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-c" || a == "-m") return "";
    if (a == "-X" || a == "-W") {
      ++i;
      continue;
    }
    if (!a.empty() && a[0] != '-') return a;
  }
  return "";
}

Status CheckSpeaksElastic(const JobLaunch& launch) {
  if (!launch.spec.elastic() || launch.argv.empty()) return Status::OK();
  const std::string& exe = launch.argv[0];
  const std::string base = exe.substr(exe.find_last_of('/') == std::string::npos ? 0 : exe.find_last_of('/') + 1);
  if (base == "bulwark-train") return Status::OK();
  const std::string head = "job " + launch.spec.id + ": recovery elastic needs ranks that train on at a new width";
  const std::string fix = "; use recovery standby (the default) or requeue";
  if (base.rfind("python", 0) == 0) {
    const std::string script = PythonScript(launch.argv);
    if (script.empty()) {
      return Status::InvalidArgument(head + ", and a script run with -c or -m cannot be checked for bulwark.elastic: "
                                     "run its file" + fix);
    }
    std::ifstream in(script);
    if (!in) return Status::InvalidArgument(head + ", and " + script + " cannot be read to check it" + fix);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    if (UsesBulwarkElastic(text)) return Status::OK();
    return Status::InvalidArgument(head + ", and " + script + " does not use bulwark.elastic (its Replicas wrap "
                                   "the model and optimizer: python/README.md)" + fix);
  }
  return Status::InvalidArgument(head + ", and " + base + " does not speak bulwark's elastic protocol (bulwark-train "
                                 "and Python scripts that use bulwark.elastic do)" + fix);
}

}  // namespace

Result<std::string> Plane::Submit(JobLaunch launch, Time now) {
  PlaneLock lock(this);
  now = NowLocked(now);
  BULWARK_RETURN_IF_ERROR(launch.spec.Validate());
  BULWARK_RETURN_IF_ERROR(CheckSpeaksElastic(launch));
  if (launch.persist_every < 0) {
    return Status::InvalidArgument("job " + launch.spec.id + ": persist_every is " +
                                   std::to_string(launch.persist_every) +
                                   "; use 0 to never persist checkpoints, or N to persist every N steps");
  }
  if (controller_) {
    return Status::FailedPrecondition("job " + launch_->spec.id + " is already running on this cluster; "
                                      "run 'bulwark down' and 'bulwark up' for a new one");
  }
  BULWARK_RETURN_IF_ERROR(ApplyJobPolicyLocked(launch));
  // Every machine whose agent is up serves the job or waits on standby:
  // heard from within the lease the tick holds it to (a machine it would
  // not call lost is up; one handed over and not yet heard here, within
  // the grace), its report processed or still queued.
  AbsorbArrivalsLocked(now);
  const Duration lease = LeaseLocked(now);
  std::vector<MachineId> machines;
  std::map<MachineId, std::string> domains;  // failure domains, as registrations said
  for (const auto& [id, a] : agents_) {
    if (now - LastHeardLocked(id) > (liveness_.OnLease(id) ? lease : options_.reconnect_grace)) continue;
    machines.push_back(id);
    if (!a.domain.empty()) domains[id] = a.domain;
  }
  if (static_cast<int>(machines.size()) < launch.spec.MachinesNeeded()) {
    return Status::FailedPrecondition(
        "job " + launch.spec.id + " needs " + std::to_string(launch.spec.MachinesNeeded()) +
        " machines but " + std::to_string(machines.size()) +
        " agents are up; start more with 'bulwark up --machines N' or lower world_size");
  }
  Result<Controller> c = Controller::Create(launch.spec, options_.policy, machines, now, domains);
  if (!c.ok()) return c.status();
  // A random base makes two clusters on one host (tests, demos) unlikely to
  // collide on rank 0's port; it is journaled with the spec, so replay and
  // every later generation agree on it. The job uses base .. base + 1999
  // (generations, then diagnostics), all below Linux's ephemeral range
  // (32768 and up): a port there can be the source port of any outgoing
  // connection on the host, and a rendezvous that cannot bind it fails as
  // if its peer were lost (a network diagnostic did, in CI).
  std::random_device rd;
  launch.master_port_base = 10000 + static_cast<int>(rd() % 20000);
  for (const std::string& a : launch.argv) launch.spec.command += (launch.spec.command.empty() ? "" : " ") + a;
  BULWARK_RETURN_IF_ERROR(store_->PutJob({launch.spec.id, EncodeLaunch(launch).dump(), ToMs(now)}));
  BULWARK_RETURN_IF_ERROR(
      store_->Append(launch.spec.id, ToMs(now),
                     json{{"type", "create"}, {"standbys", machines}, {"domains", domains}}.dump()));
  controller_.emplace(std::move(*c));
  launch_ = std::move(launch);
  throughput_ = Throughput();
  Result<std::vector<Action>> actions = controller_->Reconcile(now);
  if (!actions.ok()) return actions.status();
  BULWARK_RETURN_IF_ERROR(store_->Append(launch_->spec.id, ToMs(now), json{{"type", "reconcile"}}.dump()));
  BULWARK_RETURN_IF_ERROR(AfterDecisionLocked(*actions, true, now));
  BULWARK_RETURN_IF_ERROR(SaveSnapshotsLocked(now));
  LogLocked("job " + launch_->spec.id + " submitted: " + launch_->spec.command);
  return launch_->spec.id;
}

Status Plane::Inject(const wire::InjectRequest& req) {
  static const std::set<std::string> kFaults = {"crash", "kill", "machine-down", "device-fail", "nic-flap",
                                                "corrupt-shard", "hang", "slow", "nan", "loss-spike", "sdc",
                                                "slow-link", "compute-fail"};
  const std::string& machine = req.machine();
  const std::string& fault = req.fault();
  if (kFaults.count(fault) == 0) {
    return Status::InvalidArgument("unknown fault '" + fault + "'; use crash, kill, machine-down, device-fail, "
                                   "nic-flap, corrupt-shard, hang, slow, nan, loss-spike, sdc, slow-link or compute-fail");
  }
  std::string where = req.where();
  // sdc: `where` carries the mode (nan, drift) and `factor` the rate per step (0: 1).
  if (fault == "sdc") {
    if (where.empty()) where = "nan";
    if (where != "nan" && where != "drift") return Status::InvalidArgument("sdc --mode '" + where + "': use nan or drift");
    if (!(req.factor() >= 0 && req.factor() <= 1)) {
      return Status::InvalidArgument("sdc --rate " + std::to_string(req.factor()) + ": a probability per step in (0, 1]");
    }
  } else if (fault == "hang") {
    if (where.empty()) where = "collective";
    if (where != "collective" && where != "compute") {
      return Status::InvalidArgument("hang --where '" + where + "': use collective or compute");
    }
  } else if (!where.empty()) {
    return Status::InvalidArgument("--where applies to hang only");
  }
  if ((fault == "slow" || fault == "slow-link") && !(req.factor() > 1.0)) {
    return Status::InvalidArgument(fault + " --factor " + std::to_string(req.factor()) +
                                   ": the factor must be above 1 (2 runs the machine's " +
                                   (fault == "slow" ? "ranks" : "network links") + " 2x slower)");
  }
  if (fault != "slow" && fault != "slow-link" && fault != "sdc" && req.factor() != 0) {
    return Status::InvalidArgument("--factor applies to slow and slow-link only");
  }
  PlaneLock lock(this);
  if (agents_.count(machine) == 0) return Status::NotFound("machine " + machine + " has never registered");
  if (cluster::Emulator::Makes(fault)) {
    // A part of the machine breaks: the local backend's emulated hardware
    // takes it, and the agent meets it there (cluster/local/emulator.h).
    if (!options_.emulator) {
      return Status::FailedPrecondition("inject " + fault + ": this controller has no emulated hardware (only a "
                                        "cluster 'bulwark up' made emulates it)");
    }
    BULWARK_RETURN_IF_ERROR(options_.emulator->Inject(machine, fault, req.factor(), where));
    LogLocked("injected " + fault + " into " + machine + "'s emulated hardware");
    return Status::OK();
  }
  const int rank = req.rank();
  wire::Command c;
  c.set_kind(wire::Command::INJECT);
  c.set_id("inject/" + fault);
  c.set_inject(fault);
  c.set_inject_rank(rank);
  c.set_inject_where(where);
  c.set_inject_factor(req.factor());
  Agent& a = AgentForLocked(machine);
  a.oneshots.push_back(std::move(c));
  changed_.NotifyAll();
  WakeStreamLocked(machine, a);
  LogLocked("injecting " + fault + " on " + machine);
  return Status::OK();
}

Result<std::string> Plane::ReturnMachine(const std::string& machine, Time now) {
  PlaneLock lock(this);
  now = NowLocked(now);
  if (agents_.count(machine) == 0) return Status::NotFound("machine " + machine + " has never registered");
  BULWARK_RETURN_IF_ERROR(HandleLocked(OperatorReturned{machine, now}, now, nullptr));
  // The operator mended the machine: its emulated parts are whole again
  // before its agent is told to look afresh.
  if (options_.emulator) {
    if (Status st = options_.emulator->Repair(machine); !st.ok()) LogLocked("repairing " + machine + ": " + st.ToString());
  }
  wire::Command c;
  c.set_kind(wire::Command::RESET_HEALTH);
  c.set_id("reset-health");
  Agent& a = AgentForLocked(machine);
  a.oneshots.push_back(std::move(c));
  changed_.NotifyAll();
  WakeStreamLocked(machine, a);
  // The machine rejoins by passing its agent's self-check: with no agent
  // running it would wait as "joining" forever without saying why.
  const Duration silent = now - LastHeardLocked(machine);
  if (options_.backend) options_.backend->Resume(machine, silent > options_.heartbeat_timeout);
  if (silent > options_.heartbeat_timeout && options_.backend) {
    return "and asked the cluster manager to start its agent (silent for " + FormatDuration(silent) + "): " + machine +
           " stays 'joining' until that agent runs";
  }
  if (silent > options_.heartbeat_timeout) {
    return "but its agent has not been heard from for " + FormatDuration(silent) + ": " + machine +
           " stays 'joining' until its agent runs again (on the local cluster, `bulwark up` restarts missing "
           "agents)";
  }
  return std::string();
}

}  // namespace bulwark::plane
