#include "cli/run_job.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "control_client/control_client.h"
#include "cluster/layout.h"
#include "cluster/local/local_cluster.h"
#include "cluster/slurm/slurm_up.h"
#include "common/files.h"
#include "common/progress_pattern.h"

namespace bulwark::cli {

using control_client::ControlClient;
namespace {

using nlohmann::json;

std::atomic<bool> g_interrupted{false};
void OnInterrupt(int) { g_interrupted = true; }

// What the job is watched by: its state, step, ETTR and incidents, as one line.
std::string LiveLine(const json& job, const json& ledger) {
  char ettr[32] = "-";
  if (ledger.is_object() && ledger["cumulative"].is_object() && ledger["cumulative"]["ettr"].is_number()) {
    std::snprintf(ettr, sizeof ettr, "%.1f%%", 100.0 * ledger["cumulative"]["ettr"].get<double>());
  }
  return "job " + job.value("id", std::string("?")) + ": " + job.value("state", std::string("?")) + ", step " +
         job["last_step"].dump() + ", generation " + job["generation"].dump() + ", ETTR " + ettr + ", incidents " +
         job["incidents"].dump();
}

wire::SubmitRequest JobRequest(const Args& a, int world_size, int ranks_per_machine,
                               const std::vector<std::string>& argv) {
  wire::SubmitRequest req;
  req.set_name(a.Get("name", "run"));
  req.set_world_size(world_size);
  req.set_ranks_per_machine(ranks_per_machine);
  for (const std::string& s : argv) req.add_argv(s);
  if (a.Has("progress")) (*req.mutable_env())[kProgressRegexEnv] = a.Get("progress");
  // Unbuffered Python output: its step lines reach the agents as printed.
  (*req.mutable_env())["PYTHONUNBUFFERED"] = "1";
  req.set_persist_every(50);
  req.set_tp(1);
  req.set_pp(1);
  // The controller refuses elastic for a program that does not speak it
  // (plane_operators.cc), and any name but the three (controller/job.cc).
  req.set_recovery(a.Get("recovery", "standby"));
  req.set_provisioning_delay_ms(-1);
  // As `submit` does: the cluster directory serves as durable storage.
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::absolute(ClusterDir(a), ec);
  req.set_durable_dir(cluster::Layout{ec ? ClusterDir(a) : dir.string()}.durable(req.name()));
  return req;
}

// `a` with the backend `run` brings up made explicit for `up`: --backend,
// else Slurm inside an allocation (as srun and torchrun users expect the
// allocation to be used), else this host.
Result<Args> WithBackend(const Args& a) {
  Args b = a;
  const std::string backend = a.Get("backend", cluster::InSlurmAllocation() ? "slurm" : "local");
  if (backend != "local" && backend != "slurm") {
    return Status::InvalidArgument("run: --backend '" + backend + "': use local or slurm (the default inside a Slurm "
                                   "allocation, else local)");
  }
  b.flags["backend"] = backend;
  if (backend == "slurm" && !cluster::InSlurmAllocation()) {
    return Status::FailedPrecondition(
        "run --backend slurm: not inside a Slurm allocation (SLURM_JOB_ID is unset); call bulwark run from an "
        "sbatch script or under salloc (docs/slurm.md), or leave out --backend slurm to run on this host");
  }
  if (backend == "local" && !a.Has("machines")) {
    return Status::InvalidArgument("run: --machines N is required on this host (inside a Slurm allocation it "
                                   "defaults to the allocation's nodes less --standby)");
  }
  return b;
}

// The machines a Slurm `up` gave the job: the nodes it started agents on
// less the standbys (backend.json, which `up` wrote).
Result<int> SlurmMachines(const Args& a, int standby) {
  Result<std::string> text = ReadFile(cluster::Layout{ClusterDir(a)}.backend());
  if (!text.ok()) return text.status();
  Result<cluster::SlurmRecord> r = cluster::DecodeSlurmRecord(*text);
  if (!r.ok()) return r.status();
  return static_cast<int>(r->agents.size()) - standby;
}

}  // namespace

Result<int> RunJobCmd(const Args& given, const std::function<Status(const Args&)>& up,
                      const std::function<Status(const Args&)>& down) {
  std::vector<std::string> argv(given.positional.begin() + 1, given.positional.end());
  if (argv.empty()) {
    return Status::InvalidArgument("run: no command; usage: bulwark run --machines N [--standby S] -- COMMAND ARGS");
  }
  Result<Args> with_backend = WithBackend(given);
  if (!with_backend.ok()) return with_backend.status();
  const Args& a = *with_backend;
  const bool slurm = a.Get("backend") == "slurm";
  Result<int> machines = IntFlag(a, "machines", 0);
  if (!machines.ok()) return machines.status();
  Result<int> standby = IntFlag(a, "standby", 0);
  if (!standby.ok()) return standby.status();
  Result<int> per = IntFlag(a, "ranks-per-machine", 1);
  if (!per.ok()) return per.status();
  // Slurm without --machines: the allocation's nodes, known once up ran.
  const bool from_allocation = slurm && !a.Has("machines");
  if ((*machines <= 0 && !from_allocation) || *per <= 0) {
    return Status::InvalidArgument("run: --machines and --ranks-per-machine must be positive");
  }
  if (a.Has("progress")) {
    Result<ProgressPattern> p = ProgressPattern::Compile(a.Get("progress"));
    if (!p.ok()) return p.status().Annotate("run: --progress");
  }
  // A cluster already running there is someone's: its own `up` would fail,
  // and the cleanup after a failed `up` would bring it down.
  const cluster::Layout layout{ClusterDir(a)};
  if (cluster::LivePid(layout.controller_pid()).ok()) {
    return Status::FailedPrecondition("run: a cluster already runs in " + layout.dir +
                                      "; bulwark run brings up its own: give another --dir, or 'bulwark submit' "
                                      "to that one");
  }
  const bool as_json = a.Has("json");
  const bool tty = !as_json && ::isatty(1);
  // Ctrl-C from here on brings the cluster down rather than killing this
  // process with the cluster left behind.
  g_interrupted = false;
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  {
    // up's output is for people; --json keeps stdout to the one summary.
    std::streambuf* out = std::cout.rdbuf();
    if (as_json) std::cout.rdbuf(std::cerr.rdbuf());
    Status st = up(a);
    std::cout.rdbuf(out);
    if (!st.ok()) {
      (void)down(a);  // whatever did start
      return st;
    }
  }
  const auto started = std::chrono::steady_clock::now();
  auto finish = [&](int code, const json& summary) -> Result<int> {
    if (as_json) {
      std::cout << summary.dump(2) << "\n";
      std::streambuf* out = std::cout.rdbuf(std::cerr.rdbuf());
      (void)down(a);
      std::cout.rdbuf(out);
    } else {
      (void)down(a);
    }
    return code;
  };
  if (from_allocation) {
    Result<int> placed = SlurmMachines(a, *standby);
    if (!placed.ok()) {
      (void)down(a);
      return placed.status().Annotate("run: reading the allocation up recorded");
    }
    machines = *placed;
  }
  Result<ControlClient> client = ControlClient::Connect(ClusterDir(a));
  if (!client.ok()) {
    (void)down(a);
    return client.status();
  }
  Result<std::string> id = client->Submit(JobRequest(a, *machines * *per, *per, argv));
  if (!id.ok()) {
    (void)down(a);
    return id.status();
  }
  if (!as_json) {
    const char* job = std::getenv("SLURM_JOB_ID");  // set: WithBackend checked it
    const std::string where = slurm && job != nullptr ? std::string(" of Slurm job ") + job : "";
    std::cout << "running job " << *id << " on " << *machines << " machine(s)" << where << ": " << argv[0] << "\n";
  }

  size_t printed = 0;  // incidents printed
  std::string last_line;
  json job, ledger, incidents = json::array();
  auto silent_since = std::chrono::steady_clock::now();
  int code = kRunStopped;
  std::string outcome;
  while (true) {
    if (g_interrupted) {
      code = kRunInterrupted;
      outcome = "interrupted: the cluster is brought down mid-job";
      break;
    }
    Result<json> s = client->Status();
    if (!s.ok() || !(*s)["job"].is_object()) {
      // A status call lost under load is retried; a controller gone for
      // long is the end.
      if (std::chrono::steady_clock::now() - silent_since > std::chrono::seconds(30)) {
        outcome = "the controller did not answer for 30 s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    silent_since = std::chrono::steady_clock::now();
    job = (*s)["job"];
    if (Result<json> l = client->Ledger(); l.ok()) ledger = *l;
    // Each incident once it is resolved: what happened and what was done.
    if (Result<json> inc = client->Incidents(); inc.ok() && inc->is_array()) {
      incidents = *inc;
      while (printed < incidents.size() && incidents[printed].value("resolution", "open") != "open") {
        if (!as_json) {
          if (tty && !last_line.empty()) std::cout << "\n";
          std::cout << incidents[printed].value("summary", std::string("incident")) << "\n";
          last_line.clear();
        }
        ++printed;
      }
    }
    const std::string state = job.value("state", "");
    const std::string line = LiveLine(job, ledger);
    if (!as_json && line != last_line) {
      // A terminal gets one line rewritten; a pipe a line per change.
      std::cout << (tty ? "\r\033[K" : "") << line << (tty ? "" : "\n") << std::flush;
      last_line = line;
    }
    if (state == "completed") {
      code = kRunCompleted;
      outcome = "completed at step " + job["done_step"].dump() +
                (job.value("done_why", json()).is_string() ? " (" + job["done_why"].get<std::string>() + ")" : "");
      break;
    }
    if (state == "stopped") {
      outcome = "stopped by the controller (see the last incident)";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!as_json) {
    if (tty) std::cout << "\n";
    char ettr[32] = "-";
    if (ledger.is_object() && ledger["cumulative"].is_object() && ledger["cumulative"]["ettr"].is_number()) {
      std::snprintf(ettr, sizeof ettr, "%.1f%%", 100.0 * ledger["cumulative"]["ettr"].get<double>());
    }
    std::printf("job %s %s after %.1f s: %zu incident(s), ETTR %s\n", id->c_str(), outcome.c_str(), seconds,
                incidents.size(), ettr);
    std::fflush(stdout);
  }
  return finish(code, json{{"job", job}, {"backend", a.Get("backend")}, {"outcome", outcome}, {"exit_code", code},
                           {"seconds", seconds}, {"incidents", incidents}, {"ledger", ledger}});
}

}  // namespace bulwark::cli
