// bulwark: the control plane's one binary.
//
//   bulwark up --machines N [--standby S] [--metrics-port P] [--tls] [--nics A,B,..] [--dir D]   controller + N+S agents
//   bulwark up --backend slurm [--machines N] [--standby S] [--grow G]   agents as tasks of this Slurm allocation
//   bulwark down [--dir D]
//   bulwark run --machines N [--standby S] [--progress REGEX] [--json] -- COMMAND ARGS   up, submit, follow, down
//   bulwark submit JOB.yaml [--dir D]
//   bulwark status|incidents|ledger [--json] [--dir D]
//   bulwark inject crash|kill|machine-down|device-fail|nic-flap|corrupt-shard --machine ID [--rank R]
//   bulwark machine return --machine ID
//   bulwark update JOB.yaml [--now] [--why TEXT] | rollback [--to N] [--why TEXT] | releases [--json]
//   bulwark demo [--json] [--out runs/demo] [--data data/kjv] [--steps N]  the main job (src/demo/demo.h)
//   bulwark bench-recovery [--repeat 3] [--config tiny]  recovery figures per fault class
//   bulwark bench-checkpoint [--rounds 2] [--config small] in-memory checkpoint cost and restores
//   bulwark bench-compare [--repeat 2] [--provisioning-delay 600]  recovery vs the requeue baseline
//   bulwark bench-plane [--agents N] [--jobs J] [--json]  the controller under N simulated agents (bench/plane)
//   bulwark controller [--init] [--metrics-port P] [--dir D]   (started by up)
//   bulwark agent --machine ID [--dir D] [--metrics-port P]  (started by up)
//
// D defaults to $BULWARK_DIR, else ./.bulwark. `bulwark --help` and
// `bulwark COMMAND --help` list the commands and each one's flags, declared
// in commands.cc (CLI11). main only reads arguments and turns the commands'
// Status into an exit code.
#include <absl/synchronization/mutex.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/shard_auth.h"
#include "agent/shard_transfer.h"
#include "control_client/control_client.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config_file.h"
#include "cli/ha_up.h"
#include "cli/inject_commands.h"
#include "cli/job_file.h"
#include "cli/run_commands.h"
#include "cli/run_job.h"
#include "cli/release_commands.h"
#include "cluster/fence.h"
#include "cluster/layout.h"
#include "cluster/tls.h"
#include "cluster/local/local_cluster.h"
#include "cluster/local/netns.h"
#include "cluster/slurm/slurm_up.h"
#include "common/exit_codes.h"
#include "common/files.h"
#include "common/token.h"
#include "controller/ladder.h"
#include "plane/ha_controller.h"
#include "plane/service.h"
#include "cli/sim_command.h"
#include "cli/status_commands.h"
#include "demo/demo.h"

namespace bulwark::cli {

using control_client::ControlClient;
namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------
// up / down
// ---------------------------------------------------------------------------

// The controller's proof that a machine can be reached (issue 40): a
// connection to the address its agent advertised (its shard server, on the
// address its ranks listen on), through the agents' own handshake, so what
// answers is that cluster's agent and not whatever else holds the port.
Status ProveReachable(const std::string& addr, const std::string& token) {
  // A name (an operator's --address) as the IPv4 address peers would dial.
  std::string target = addr;
  const size_t colon = addr.rfind(':');
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  if (colon != std::string::npos && ::getaddrinfo(addr.substr(0, colon).c_str(), nullptr, &hints, &found) == 0 &&
      found != nullptr) {
    char buf[INET_ADDRSTRLEN] = {};
    if (::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, buf, sizeof buf) != nullptr) {
      target = std::string(buf) + addr.substr(colon);
    }
  }
  if (found != nullptr) ::freeaddrinfo(found);
  Result<int> fd = agent::DialTcp(target, 2);
  // Nothing answered (shard_transfer.h): said with the operator's name.
  if (!fd.ok() && fd.status().message().find("no answer within") != std::string::npos) {
    return Status::Unavailable("connecting to " + addr + ": no answer within 2 s");
  }
  if (!fd.ok()) return fd.status();
  Status st = agent::AuthenticateToPeer(*fd, token);
  ::close(*fd);
  return st;
}

// Polls `ready` until it holds or `seconds` pass.
bool WaitFor(double seconds, const std::function<bool()>& ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return ready();
}

// What `bulwark up` was asked for, checked before anything starts.
struct UpRequest {
  std::string dir;
  int machines = 0;
  int standby = 0;
  bool slurm = false;
  std::vector<std::string> nics;  // --nics: each machine's interface, in machine order
  // Each machine in a network namespace of its own: --netns, or by default
  // (auto) where this host can make them; --no-netns shares the host's.
  bool netns = false;
  bool netns_auto = false;   // not asked for: fall back to the shared stack where namespaces fail
  std::string shared_why;    // auto and shared: why (a flag that needs the shared stack)
  int racks = 0;             // --racks K: failure domains, each rack a bridge of its own (namespaces only)
  json policy;               // --policy FILE's fields, checked; null: the shipped defaults
};

// "a,b,c" -> {"a", "b", "c"}; "" -> {}.
std::vector<std::string> CommaList(const std::string& s) {
  std::vector<std::string> out;
  for (size_t at = 0; !s.empty() && at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// Namespaces are the default where they can be made: machines with links
// of their own meet real network faults (docs/control-plane.md). The
// shared stack stays for what needs it: Slurm (real hosts), --nics (the
// host's own interfaces), a user who is not root; and BULWARK_NETNS=off sets the default (the test
// suite keeps the shared stack but for its namespace tests).
Status ChooseNetns(const Args& a, UpRequest* up) {
  const char* env = std::getenv("BULWARK_NETNS");
  const std::string want = a.Has("netns") ? "on" : a.Has("no-netns") ? "off" : env != nullptr ? env : "auto";
  if (a.Has("netns") && a.Has("no-netns")) return Status::InvalidArgument("up: give --netns or --no-netns, not both");
  if (want != "on" && want != "off" && want != "auto") {
    return Status::InvalidArgument("up: BULWARK_NETNS='" + want + "': use on, off or auto (the default)");
  }
  const std::string needs_shared = up->slurm ? "--backend slurm" : !up->nics.empty() ? "--nics" : "";
  if (want == "on" && !needs_shared.empty()) {
    return Status::InvalidArgument("up: --netns gives each local machine its own link; it does not combine with " +
                                   needs_shared + "; leave out one of them");
  }
  up->netns = want == "on" || (want == "auto" && needs_shared.empty());
  up->netns_auto = want == "auto";
  if (want == "auto" && !up->slurm && !needs_shared.empty()) up->shared_why = needs_shared;
  return Status::OK();
}

Result<UpRequest> CheckUpFlags(const Args& a) {
  UpRequest up;
  up.dir = ClusterDir(a);
  Result<int> machines = IntFlag(a, "machines", 0);
  Result<int> standby = IntFlag(a, "standby", 0);
  if (!machines.ok()) return machines.status();
  if (!standby.ok()) return standby.status();
  up.machines = *machines;
  up.standby = *standby;
  const std::string backend = a.Get("backend", "local");
  if (backend != "local" && backend != "slurm") {
    return Status::InvalidArgument("up: --backend '" + backend + "': use local (the default) or slurm");
  }
  up.slurm = backend == "slurm";
  // Slurm: --machines defaults to the allocation's nodes less the standbys.
  if ((up.machines <= 0 && !up.slurm) || up.machines < 0 || up.standby < 0) {
    return Status::InvalidArgument("up: --machines must be positive and --standby not negative");
  }
  if (!up.slurm && a.Has("grow")) return Status::InvalidArgument("up: --grow applies to --backend slurm only");
  up.nics = CommaList(a.Get("nics"));
  if (!up.nics.empty() && (up.slurm || static_cast<int>(up.nics.size()) != up.machines + up.standby)) {
    return Status::InvalidArgument("up: --nics names " + std::to_string(up.nics.size()) + " interface(s) for " +
                                   std::to_string(up.machines + up.standby) +
                                   " machine(s): give one per machine, standbys included, in order (local backend)");
  }
  BULWARK_RETURN_IF_ERROR(ChooseNetns(a, &up));
  Result<int> racks = IntFlag(a, "racks", 0);
  if (!racks.ok()) return racks.status();
  up.racks = *racks;
  if (up.racks < 0 || up.racks > up.machines + up.standby || (up.racks > 0 && !up.netns)) {
    return Status::InvalidArgument("up: --racks K puts the machines' namespaces under K switches: K from 1 to the "
                                   "machines' count, with namespaces (not --no-netns, --nics or Slurm)");
  }
  if (up.slurm && a.Has("tls")) {
    return Status::InvalidArgument("up: --tls is not supported with --backend slurm yet (the certificates name "
                                   "127.0.0.1 only); leave out --tls");
  }
  if (cluster::LivePid(cluster::Layout{up.dir}.controller_pid()).ok()) {
    return Status::FailedPrecondition("a cluster already runs in " + up.dir + "; 'bulwark down --dir " + up.dir +
                                      "' first");
  }
  // The ladder's settings are checked here, before anything starts, and
  // again by the controller itself.
  controller::LadderConfig ladder;
  BULWARK_RETURN_IF_ERROR(
      controller::ApplyLadderFlags(a.Get("ladder-rungs"), a.Get("ladder-tests"), a.Get("ladder-budget"), &ladder));
  BULWARK_RETURN_IF_ERROR(controller::ApplyLadderAlignEvery(a.Get("ladder-align-every"), &ladder));
  if (a.Has("policy")) {
    Result<json> policy = ReadPolicyFile(a.Get("policy"));
    if (!policy.ok()) return policy.status();
    up.policy = *policy;
  }
  return up;
}

// Where the agents run: this host, or the Slurm allocation `up` runs in
// (the record tells the controller; a local cluster has none).
struct AgentPlaces {
  std::vector<std::string> ids;
  std::string listen = "127.0.0.1";  // the address the controller listens on
  std::optional<cluster::SlurmRecord> slurm;
  std::optional<cluster::NetnsPlan> netns;
  std::string shared_why;  // a local cluster that fell back to the host's network: why
};

Result<AgentPlaces> PlaceAgents(const Args& a, const UpRequest& up, const cluster::Layout& layout,
                                const std::string& self) {
  AgentPlaces places;
  places.ids = cluster::MachineIds(up.machines + up.standby);
  places.shared_why = up.shared_why;
  std::remove(layout.backend().c_str());
  BULWARK_RETURN_IF_ERROR(RemoveTree(layout.slurm()));
  cluster::SystemRunner runner;
  Status can = up.netns ? cluster::NetnsAvailable(runner) : Status::OK();
  if (!can.ok() && !up.netns_auto) {
    return Status::FailedPrecondition("up: --netns needs root and a working 'ip netns' (" + can.message() +
                                      "); leave out --netns to share this host's network");
  }
  if (!can.ok()) places.shared_why = "namespaces need root and a working 'ip netns': " + can.message();
  if (!can.ok() && up.racks > 0) return Status::FailedPrecondition("up: --racks needs namespaces: " + can.message());
  if (up.netns && can.ok()) {
    // Under --ha each controller and each etcd member gets a namespace too,
    // after the machines' (not with racks, whose plan places every
    // namespace under a rack).
    std::vector<std::string> ns_ids = places.ids;
    if (a.Has("ha") && up.racks == 0) {
      for (const std::string& id : HaControllerIds()) ns_ids.push_back(id);
      for (const std::string& id : HaEtcdIds()) ns_ids.push_back(id);
    }
    Result<cluster::NetnsPlan> plan =
        cluster::CreateNetns(runner, layout, ns_ids, cluster::RacksOf(up.machines, up.standby, up.racks));
    if (!plan.ok()) return plan.status();
    places.netns = *plan;
    places.listen = plan->gateway;  // the host's end of the bridge
  }
  if (!up.slurm) return places;
  Result<int> grow = IntFlag(a, "grow", 0);
  if (!grow.ok()) return grow.status();
  std::error_code ec;
  const std::string abs_dir = std::filesystem::absolute(up.dir, ec).string();
  // `bulwark run` brings its cluster up through here: its errors say run.
  const std::string command = a.positional.at(0) == "run" ? "run" : "up --backend slurm";
  Result<cluster::SlurmRecord> r =
      cluster::PlanSlurmUp(runner, {up.machines, up.standby, *grow, self, abs_dir, command});
  if (!r.ok()) return r.status();
  places.slurm = *r;
  places.ids = places.slurm->agents;
  // Agents on other nodes reach the controller by this host's name.
  Result<std::string> host = cluster::ControllerHost(a.Get("listen"));
  if (!host.ok()) return host.status();
  places.listen = *host;
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(layout.backend(), cluster::EncodeSlurmRecord(*places.slurm)));
  return places;
}

// A fresh cluster's state: a new token, no database, new credentials.
Status FreshClusterState(const Args& a, const cluster::Layout& layout, const std::string& listen) {
  Result<std::string> token = CreateToken(layout.token());
  if (!token.ok()) return token.status();
  // Port 0: the controller binds one the kernel picks and writes it back here
  // once it listens, so no port is guessed free and taken by another
  // process before the controller binds it. Restarts reuse the written one.
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(layout.controller_addr(), listen + ":0\n"));
  std::remove(layout.controllers_addr().c_str());  // an earlier up --ha's list (up --ha writes its own)
  std::remove(layout.controller_pid().c_str());
  // A fresh cluster starts from a fresh database.
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((layout.controller_db() + suffix).c_str());
  // ... and fresh credentials: --tls makes a new CA; without it none is used.
  BULWARK_RETURN_IF_ERROR(RemoveTree(layout.dir + "/tls"));
  if (a.Has("tls")) BULWARK_RETURN_IF_ERROR(cluster::CreateClusterTls(layout, listen));
  return Status::OK();
}

// Starts `bulwark controller` and returns a client once it answers.
Result<ControlClient> StartController(const Args& a, const cluster::Layout& layout, const std::string& self) {
  std::vector<std::string> argv = {self, "controller", "--init", "--dir", layout.dir};
  if (a.Has("metrics-port")) {
    Result<int> mport = IntFlag(a, "metrics-port", 0);
    if (!mport.ok()) return mport.status();
    argv.insert(argv.end(), {"--metrics-port", std::to_string(*mport)});
  }
  for (const char* f : {"ladder-rungs", "ladder-tests", "ladder-budget", "failure-rate", "ladder-align-every"}) {
    if (a.Has(f)) argv.insert(argv.end(), {std::string("--") + f, a.Get(f)});
  }
  BULWARK_RETURN_IF_ERROR(cluster::SpawnDetached(argv, layout.controller_log()));
  // The controller writes its address, then its pid file, once it listens.
  // Calling before that costs a whole call deadline: gRPC holds a call made
  // while its first connection attempt fails.
  if (!WaitFor(15, [&] { return cluster::LivePid(layout.controller_pid()).ok(); })) {
    return Status::Unavailable("controller did not come up within 15 s; see " + layout.controller_log());
  }
  Result<ControlClient> client = ControlClient::Connect(layout.dir);
  if (!client.ok()) return client.status();
  if (!WaitFor(15, [&] { return client->Status().ok(); })) {
    return Status::Unavailable("controller did not answer within 15 s; see " + layout.controller_log());
  }
  return client;
}

// Starts the agents (Slurm: as its steps) and waits until every one is heard.
Status StartAgents(const Args& a, const cluster::Layout& layout, const std::string& self, const AgentPlaces& places,
                   ControlClient& client) {
  if (places.slurm) BULWARK_RETURN_IF_ERROR(cluster::LaunchSlurmAgents(layout, *places.slurm));
  const std::vector<std::string> nics = CommaList(a.Get("nics"));  // CheckUpFlags counted them
  for (size_t i = 0; !places.slurm && i < places.ids.size(); ++i) {
    const std::string& id = places.ids[i];
    BULWARK_RETURN_IF_ERROR(MakeDirs(layout.machine(id)));
    std::vector<std::string> argv = {self, "agent", "--machine", id, "--dir", layout.dir};
    if (a.Has("signatures")) argv.insert(argv.end(), {"--signatures", a.Get("signatures")});
    if (i < nics.size()) argv.insert(argv.end(), {"--nic", nics[i]});
    if (places.netns) {
      const cluster::NetnsMachine& m = places.netns->machines[i];
      argv.insert(argv.end(), {"--nic", cluster::kNetnsLink, "--address", m.address});
      if (!m.rack.empty()) argv.insert(argv.end(), {"--domain", m.rack});
      argv = cluster::InNetns(m, argv);
    }
    BULWARK_RETURN_IF_ERROR(cluster::SpawnDetached(argv, layout.agent_log(id)));
  }
  // Slurm starts steps through slurmctld and each node's slurmd: allow more.
  const int agent_wait_s = places.slurm ? 60 : 20;
  const bool all = WaitFor(agent_wait_s, [&] {
    Result<json> s = client.Status();
    if (!s.ok()) return false;
    int heard = 0;
    for (const json& m : (*s)["machines"]) heard += m["last_heard_s_ago"].get<double>() < 3.0;
    return heard >= static_cast<int>(places.ids.size());
  });
  if (!all) {
    return Status::Unavailable("not every agent registered within " + std::to_string(agent_wait_s) + " s; see " +
                               layout.machines() + "/*/agent.log");
  }
  return Status::OK();
}

// bulwark up: check, place, start fresh, start the controller, then the agents.
Status Up(const Args& a) {
  Result<UpRequest> up = CheckUpFlags(a);
  if (!up.ok()) return up.status();
  const cluster::Layout layout{up->dir};
  BULWARK_RETURN_IF_ERROR(MakeDirs(layout.machines()));
  const std::string self = ExeDir() + "/bulwark";
  Result<AgentPlaces> places = PlaceAgents(a, *up, layout, self);
  if (!places.ok()) return places.status();
  BULWARK_RETURN_IF_ERROR(FreshClusterState(a, layout, places->listen));
  // Fencing: on by default where a machine can be cut off (namespaces).
  // Under --ha a failover (the 5 s lease, then a catch-up) must not fence
  // every machine: the fence outlasts it.
  const std::string fence =
      a.Has("fence-timeout") ? a.Get("fence-timeout") : places->netns ? (a.Has("ha") ? "10" : "3") : "0";
  std::remove(layout.fence_timeout().c_str());
  if (fence != "0") BULWARK_RETURN_IF_ERROR(WriteFileAtomic(layout.fence_timeout(), fence + "\n"));
  if (Result<std::chrono::milliseconds> f = cluster::ReadFenceTimeout(layout); !f.ok()) {
    return Status::InvalidArgument("up: --fence-timeout '" + fence + "' is not seconds; e.g. --fence-timeout 3");
  }
  std::remove(layout.policy().c_str());
  if (!up->policy.is_null()) BULWARK_RETURN_IF_ERROR(WriteFileAtomic(layout.policy(), up->policy.dump(2) + "\n"));
  Result<ControlClient> client =
      a.Has("ha") ? StartHa(a, layout, self, places->listen, places->netns ? &*places->netns : nullptr)
                  : StartController(a, layout, self);
  if (!client.ok()) return client.status();
  BULWARK_RETURN_IF_ERROR(StartAgents(a, layout, self, *places, *client));
  std::cout << "cluster up in " << up->dir << ": controller at " << client->address() << ", " << places->ids.size()
            << " machines (" << places->ids.size() - up->standby << " for jobs, " << up->standby << " standby)"
            << (places->slurm ? " as tasks of Slurm job " + places->slurm->job : "")
            << (places->netns ? ", each in a network namespace on bridge " + places->netns->bridge + " (" +
                                    places->netns->gateway + "/24)"
                              : "")
            << (places->netns && !places->netns->racks.empty()
                    ? ", under " + std::to_string(places->netns->racks.size()) + " racks' switches"
                    : "")
            << "\n";
  if (!places->shared_why.empty()) {
    std::cout << "the machines share this host's network (" << places->shared_why
              << "): network faults are emulated, not real\n";
  }
  if (Result<json> s = client->Status(); s.ok() && (*s)["metrics"].is_string()) {
    std::cout << "metrics at " << (*s)["metrics"].get<std::string>() << "\n";
  }
  return Status::OK();
}

Status Down(const Args& a) {
  const cluster::Layout layout{ClusterDir(a)};
  // Agents first, all at once (each stops its ranks on SIGTERM), then the
  // controller: the whole cluster is gone within about two seconds.
  std::vector<pid_t> agents;
  size_t stopped = 0;
  // Down goes on past a process that would not die: the rest still go, and
  // the one left is named for the operator to kill.
  auto terminate = [](const std::vector<pid_t>& pids) {
    if (Status st = cluster::Terminate(pids, 5000); !st.ok()) std::cerr << "bulwark: " << st.message() << "\n";
  };
  if (PathExists(layout.backend())) {
    // A Slurm cluster's agents are steps and jobs on other hosts: their pid
    // files name processes there, not here. Slurm stops them, after the
    // controller: one that saw its agents vanish would drain their nodes.
    if (Result<pid_t> pid = cluster::LivePid(layout.controller_pid()); pid.ok()) {
      terminate({*pid});
      ++stopped;
    }
    cluster::SystemRunner runner;
    Result<int> cancelled = cluster::StopSlurmAgents(layout, runner);
    if (cancelled.ok()) {
      std::cout << "cancelled " << *cancelled << " Slurm steps and jobs\n";
    } else {
      std::cerr << "bulwark: " << cancelled.status().message() << "; cancel the agents' steps with scancel\n";
    }
  } else {
    for (const std::string& id : ListDir(layout.machines())) {
      if (Result<pid_t> pid = cluster::LivePid(layout.agent_pid(id)); pid.ok()) agents.push_back(*pid);
    }
    terminate(agents);
    stopped = agents.size();
  }
  if (Result<pid_t> pid = cluster::LivePid(layout.controller_pid()); pid.ok()) {
    terminate({*pid});
    ++stopped;
  }
  // `up --ha`: the controllers, then the etcd members they journal to.
  for (const std::vector<pid_t>& ha : {HaControllerPids(layout), HaEtcdPids(layout)}) {
    terminate(ha);
    stopped += ha.size();
  }
  std::cout << "stopped " << stopped << " processes in " << layout.dir << "\n";
  // The machines' namespaces go last: nothing runs in them any more.
  if (Result<cluster::NetnsPlan> plan = cluster::LoadNetns(layout); plan.ok()) {
    cluster::SystemRunner runner;
    if (Status st = cluster::DestroyNetns(runner, layout, *plan); !st.ok()) std::cerr << "bulwark: " << st.message() << "\n";
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------
// job and reports
// ---------------------------------------------------------------------------

Status Submit(const Args& a) {
  if (a.positional.size() < 2) return Status::InvalidArgument("submit: usage: bulwark submit JOB.yaml");
  Result<JobFile> job = LoadJobFile(a.positional[1], ExeDir() + "/bulwark-train");
  if (!job.ok()) return job.status();
  Result<ControlClient> client = ControlClient::Connect(ClusterDir(a));
  if (!client.ok()) return client.status();
  // --job: one job of several on the fleet, under that name (plane/fleet.h).
  if (a.Has("job")) job->name = a.Get("job");
  wire::SubmitRequest req;
  req.set_name(job->name);
  req.set_named(a.Has("job"));
  req.set_world_size(job->world_size);
  req.set_ranks_per_machine(job->ranks_per_machine);
  for (const std::string& s : job->argv) req.add_argv(s);
  for (const auto& [k, v] : job->env) (*req.mutable_env())[k] = v;
  req.set_persist_every(job->persist_every);
  req.set_tp(job->tp);
  req.set_pp(job->pp);
  req.set_recovery(job->recovery);
  req.set_provisioning_delay_ms(job->provisioning_delay_s < 0 ? -1 : int64_t{job->provisioning_delay_s} * 1000);
  for (const auto& [k, v] : job->policy) (*req.mutable_policy())[k] = v;
  // Local clusters share one disk: the cluster directory outlives every
  // machine, so it serves as the durable storage. Absolute, because the
  // agents and ranks do not run in this process's directory.
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::absolute(ClusterDir(a), ec);
  req.set_durable_dir(cluster::Layout{ec ? ClusterDir(a) : dir.string()}.durable(job->name));
  Result<std::string> id = client->Submit(req);
  if (!id.ok()) return id.status();
  std::cout << "submitted job " << *id << "\n";
  return Status::OK();
}

Status Run(const Args& a) {
  const std::string cmd = a.positional.at(0);
  if (cmd == "up") return Up(a);
  if (cmd == "down") return Down(a);
  if (cmd == "submit") return Submit(a);
  if (cmd == "status") return StatusCmd(a);
  if (cmd == "incidents") return IncidentsCmd(a);
  if (cmd == "ledger") return LedgerCmd(a);
  if (cmd == "inject") return InjectCmd(a);
  if (cmd == "machine") return MachineCmd(a);
  if (cmd == "update") {
    if (a.positional.size() < 2) return Status::InvalidArgument("update: usage: bulwark update JOB.yaml [--now]");
    return UpdateCmd(ClusterDir(a), a.Get("job"), a.positional[1], ExeDir() + "/bulwark-train", a.Has("now"),
                     a.Get("why"));
  }
  if (cmd == "rollback") {
    Result<int> to = IntFlag(a, "to", 0);
    if (!to.ok()) return to.status();
    if (*to < 0) return Status::InvalidArgument("rollback: --to must be a release number (1 is the submitted job)");
    return RollbackCmd(ClusterDir(a), a.Get("job"), *to, a.Get("why"));
  }
  if (cmd == "releases") return ReleasesCmd(ClusterDir(a), a.Get("job"), a.Has("json"));
  if (cmd == "demo") return DemoCmd(a);
  if (cmd == "sim") return SimCmd(a.flags);
  if (cmd == "bench-recovery") return BenchRecoveryCmd(a);
  if (cmd == "bench-checkpoint") return BenchCheckpointCmd(a);
  if (cmd == "bench-compare") return BenchCompareCmd(a);
  if (cmd == "bench-implicit") return BenchImplicitCmd(a);
  if (cmd == "bench-ladder") return BenchLadderCmd(a);
  if (cmd == "bench-plane") return BenchPlaneCmd(a);
  if (cmd == "controller") {
    Result<int> mport = IntFlag(a, "metrics-port", -1);
    if (!mport.ok()) return mport.status();
    plane::ControllerOptions o{ClusterDir(a), a.Has("init"), *mport, a.Get("ladder-rungs"),
                               a.Get("ladder-tests"), a.Get("ladder-budget"), a.Get("failure-rate"),
                               a.Get("ladder-align-every"), ProveReachable, nullptr, nullptr, nullptr};
    if (!a.Has("etcd")) return plane::RunController(o);
    Result<int> lease = IntFlag(a, "etcd-lease", plane::HaOptions{}.lease_s);
    if (!lease.ok()) return lease.status();
    plane::HaOptions ha{a.Get("etcd"), a.Has("etcd-prefix") ? a.Get("etcd-prefix") : "/bulwark/", a.Get("controller-id"),
                        *lease, a.Get("cluster-dir")};
    return plane::RunHaController(o, ha);
  }
  if (cmd == "agent") {
    agent::AgentOptions o;
    o.dir = ClusterDir(a);
    o.machine = a.Get("machine");
    o.controllers = a.Get("controller");
    o.builtin_signatures = a.Get("signatures");  // "": the table built into the binary
    o.nic = a.Get("nic");
    o.address = a.Get("address");
    o.domain = a.Get("domain");
    Result<int> mport = IntFlag(a, "metrics-port", -1);
    if (!mport.ok()) return mport.status();
    o.metrics_port = *mport;
    return agent::RunAgent(o);
  }
  // commands.cc declares no other command.
  return Status::Internal("command '" + cmd + "' is declared but not dispatched");
}

// `bulwark run` ends with its job's outcome, not only with an error.
Result<int> RunJob(const Args& a) { return RunJobCmd(a, Up, Down); }

}  // namespace
}  // namespace bulwark::cli

int main(int argc, char** argv) {
  // Every subcommand, the agent's included: Debian's Abseil, built without
  // NDEBUG, otherwise runs its deadlock detector on each of gRPC's locks
  // (plane/service.cc's RunController says what that cost the controller).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  auto line = bulwark::cli::ParseCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  if (line.ok() && !line->help.empty()) {
    std::fputs(line->help.c_str(), stdout);
    return 0;
  }
  if (line.ok() && line->args.positional.at(0) == "run") {
    bulwark::Result<int> code = bulwark::cli::RunJob(line->args);
    if (code.ok()) return *code;
    std::fprintf(stderr, "bulwark: error: %s\n", code.status().message().c_str());
    return bulwark::ExitCodeFor(code.status());
  }
  bulwark::Status st = line.ok() ? bulwark::cli::Run(line->args) : line.status();
  if (!st.ok()) {
    std::fprintf(stderr, "bulwark: error: %s\n", st.message().c_str());
    return bulwark::ExitCodeFor(st);
  }
  return 0;
}
