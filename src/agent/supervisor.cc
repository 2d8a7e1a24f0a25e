#include "agent/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>

#include "rank_client/rank_link.h"
#include "common/files.h"

namespace bulwark::agent {

std::map<std::string, std::string> TorchrunEnv(const RankGroupSpec& spec, int rank, int local_rank) {
  std::map<std::string, std::string> env = spec.env;
  if (auto it = spec.rank_env.find(rank); it != spec.rank_env.end()) {
    for (const auto& [k, v] : it->second) env[k] = v;
  }
  env["RANK"] = std::to_string(rank);
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["WORLD_SIZE"] = std::to_string(spec.world_size);
  env["LOCAL_WORLD_SIZE"] = std::to_string(spec.local_world_size);
  env["MASTER_ADDR"] = spec.master_addr;
  env["MASTER_PORT"] = std::to_string(spec.master_port);
  // torchrun's name for the restart count; a rank may log or seed with it.
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(spec.generation > 0 ? spec.generation - 1 : 0);
  return env;
}

std::string Supervisor::LogPath(int rank) const {
  return ranks_dir_ + "/rank-" + std::to_string(rank) + ".log";
}

std::string Supervisor::Identity(const RankGroupSpec& spec) {
  // A process's parameter store is padded to its world size: part of the
  // job, unless the job runs at any width (trainer/step/elastic.h pads for all).
  return JobIdentity(spec.argv, spec.env) + "\x02" + (spec.elastic ? "elastic" : std::to_string(spec.world_size));
}

Result<pid_t> Supervisor::Spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& vars,
                                const std::string& log, const std::string& banner) {
  const pid_t agent = ::getpid();
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("rank log " + log + ": " + std::strerror(errno));
  (void)!::write(fd, banner.data(), banner.size());

  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls.
  // The job's and torchrun's variables replace the agent's own: getenv
  // returns the first match, so a duplicate would let the agent's win.
  std::map<std::string, std::string> mine = vars;
  // Without it bulwark-train re-executes itself once to set it (docs/
  // trainer.md: libgomp's spinning starves OpenBLAS), ~0.4 s per restart.
  if (!std::getenv("OMP_WAIT_POLICY")) mine.emplace("OMP_WAIT_POLICY", "PASSIVE");
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (!mine.count(kv.substr(0, kv.find('=')))) envs.push_back(std::move(kv));
  }
  for (const auto& [k, v] : mine) envs.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : envs) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    return Status::IOError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != agent) ::_exit(127);  // the agent died before prctl took hold
    ::setpgid(0, 0);
    struct rlimit no_core = {0, 0};  // an aborting rank must not fill the disk
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execvpe(argv[0], argv.data(), envp.data());
    const char msg[] = "bulwark-agent: exec failed: no such program or not executable\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(fd);
  return pid;
}

Result<std::vector<Handoff>> Supervisor::Start(const RankGroupSpec& spec, bool reuse) {
  BULWARK_RETURN_IF_ERROR(MakeDirs(ranks_dir_));
  if (spec.argv.empty()) {
    StopAll();
    return Status::InvalidArgument("start ranks: the job's command is empty");
  }
  const std::string identity = Identity(spec);
  std::map<int, RunningProcess> live;
  for (const auto& [rank, pid] : live_) {
    auto w = waiting_.find(pid);
    live[rank] = {pid, identity_, w != waiting_.end() && w->second};
  }
  std::vector<int> wanted;
  for (const auto& r : spec.ranks) wanted.push_back(r.first);
  HandoffPlan plan = reuse ? PlanHandoff(wanted, identity, live, spares_) : PlanHandoff(wanted, identity, {}, {});
  if (!reuse) {
    for (const auto& [rank, pid] : live_) plan.stop.push_back(rank);
  }
  // Stopped first, all at once: their grace periods overlap.
  std::vector<pid_t> stop;
  for (int r : plan.stop) {
    stop.push_back(live_[r]);
    live_.erase(r);
  }
  Stop(stop, std::chrono::milliseconds(1500));
  for (const Handoff& h : plan.ranks) {
    if (h.path == HandoffPath::kPrespawned) {
      spares_.erase(std::remove_if(spares_.begin(), spares_.end(), [&](const RunningProcess& p) { return p.pid == h.pid; }),
                    spares_.end());
    }
  }
  live_.clear();
  waiting_.clear();
  generation_ = spec.generation;
  identity_ = identity;
  std::vector<Handoff> out;
  for (size_t i = 0; i < spec.ranks.size(); ++i) {
    const auto [rank, local] = spec.ranks[i];
    Handoff h = plan.ranks[i];
    const std::string banner = "bulwark-agent: starting rank " + std::to_string(rank) + " of generation " +
                               std::to_string(spec.generation) + " (" + HandoffPathName(h.path) +
                               (h.pid > 0 ? ", pid " + std::to_string(h.pid) : "") + ")\n";
    if (h.path == HandoffPath::kCold) {
      Result<pid_t> pid = Spawn(spec.argv, TorchrunEnv(spec, rank, local), LogPath(rank), banner);
      if (!pid.ok()) return pid.status().Annotate("rank " + std::to_string(rank));
      h.pid = *pid;
    } else {
      // Before its ASSIGN: the banner precedes the generation's output.
      const int fd = ::open(LogPath(rank).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        (void)!::write(fd, banner.data(), banner.size());
        ::close(fd);
      }
    }
    live_[rank] = h.pid;
    out.push_back(h);
  }
  return out;
}

Status Supervisor::Prespawn(const RankGroupSpec& spec) {
  BULWARK_RETURN_IF_ERROR(MakeDirs(ranks_dir_));
  std::map<std::string, std::string> env = spec.env;
  env[rank_client::kPrespawnEnv] = "1";
  // No rank yet: the torchrun variables come with the ASSIGN.
  for (const char* k : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) env.erase(k);
  const std::string log = ranks_dir_ + "/spare.log";
  Result<pid_t> pid = Spawn(spec.argv, env, log, "bulwark-agent: pre-spawning a spare for generation " +
                                                     std::to_string(spec.generation) + "\n");
  if (!pid.ok()) return pid.status();
  spares_.push_back({*pid, Identity(spec), false});
  return Status::OK();
}

void Supervisor::MarkWaiting(pid_t pid) {
  for (auto& [rank, p] : live_) {
    if (p == pid) waiting_[pid] = true;
  }
  for (RunningProcess& s : spares_) {
    if (s.pid == pid) s.waiting = true;
  }
}

bool Supervisor::AnyLiveNotWaiting(const RankGroupSpec& spec) const {
  if (Identity(spec) != identity_) return false;
  for (const auto& [rank, pid] : live_) {
    if (!waiting_.count(pid)) return true;
  }
  return false;
}

Status Supervisor::Discard(int rank) {
  auto it = live_.find(rank);
  if (it == live_.end() || !waiting_.count(it->second)) {
    return Status::NotFound("rank " + std::to_string(rank) + " does not wait on this machine");
  }
  waiting_.erase(it->second);
  Stop({it->second}, std::chrono::milliseconds(0));
  live_.erase(it);
  return Status::OK();
}

size_t Supervisor::SpareCount(const std::string& identity) const {
  return static_cast<size_t>(std::count_if(spares_.begin(), spares_.end(),
                                           [&](const RunningProcess& s) { return s.identity == identity; }));
}

size_t Supervisor::WaitingSpareCount(const std::string& identity) const {
  return static_cast<size_t>(std::count_if(spares_.begin(), spares_.end(), [&](const RunningProcess& s) {
    return s.identity == identity && s.waiting;
  }));
}

void Supervisor::StopSpares(const std::set<std::string>& keep) {
  std::vector<pid_t> pids;
  std::vector<RunningProcess> kept;
  for (const RunningProcess& s : spares_) {
    if (keep.count(s.identity) != 0) {
      kept.push_back(s);
    } else {
      pids.push_back(s.pid);
    }
  }
  spares_ = std::move(kept);
  Stop(pids, std::chrono::milliseconds(1500));
}

int Supervisor::RankOf(pid_t pid) const {
  for (const auto& [rank, p] : live_) {
    if (p == pid) return rank;
  }
  return -1;
}

void Supervisor::Stop(std::vector<pid_t> pids, std::chrono::milliseconds grace) {
  for (pid_t pid : pids) {
    ::kill(pid, grace.count() > 0 ? SIGTERM : SIGKILL);
    ::kill(pid, SIGCONT);  // a stopped rank (fail-slow emulation) must run to hear it
  }
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!pids.empty()) {
    for (auto it = pids.begin(); it != pids.end();) {
      if (::waitpid(*it, nullptr, WNOHANG) == *it) {
        it = pids.erase(it);
      } else {
        ++it;
      }
    }
    if (pids.empty()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (pid_t pid : pids) ::kill(pid, SIGKILL);
      for (pid_t pid : pids) ::waitpid(pid, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Supervisor::StopAll(std::chrono::milliseconds grace) {
  std::vector<pid_t> pids;
  for (const auto& [rank, pid] : live_) pids.push_back(pid);
  live_.clear();
  waiting_.clear();
  Stop(pids, grace);
}

std::vector<RankExit> Supervisor::Reap() {
  std::vector<RankExit> out;
  // A spare that ended (it failed to set up, or was killed) is only gone.
  for (auto it = spares_.begin(); it != spares_.end();) {
    if (::waitpid(it->pid, nullptr, WNOHANG) == it->pid) {
      it = spares_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = live_.begin(); it != live_.end();) {
    int status = 0;
    if (::waitpid(it->second, &status, WNOHANG) != it->second) {
      ++it;
      continue;
    }
    RankExit e;
    e.rank = it->first;
    e.at = std::chrono::system_clock::now();
    if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
    if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
    out.push_back(e);
    waiting_.erase(it->second);
    it = live_.erase(it);
  }
  return out;
}

Status Supervisor::Signal(int rank, int sig) {
  auto it = live_.find(rank);
  if (it == live_.end()) return Status::NotFound("rank " + std::to_string(rank) + " does not run on this machine");
  if (::kill(it->second, sig) != 0) return Status::IOError("signal to rank " + std::to_string(rank) + ": " + std::strerror(errno));
  return Status::OK();
}

std::vector<int> Supervisor::LiveRanks() const {
  std::vector<int> r;
  for (const auto& [rank, pid] : live_) r.push_back(rank);
  return r;
}

int Supervisor::FirstRank() const { return live_.empty() ? -1 : live_.begin()->first; }

}  // namespace bulwark::agent
