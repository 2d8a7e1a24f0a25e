#include "agent/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <thread>

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

Status Supervisor::Start(const RankGroupSpec& spec) {
  StopAll();
  BULWARK_RETURN_IF_ERROR(MakeDirs(ranks_dir_));
  if (spec.argv.empty()) return Status::InvalidArgument("start ranks: the job's command is empty");
  generation_ = spec.generation;
  const pid_t agent = ::getpid();
  for (const auto& [rank, local] : spec.ranks) {
    const std::string log = LogPath(rank);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return Status::IOError("rank log " + log + ": " + std::strerror(errno));
    const std::string banner = "bulwark-agent: starting rank " + std::to_string(rank) + " of generation " +
                               std::to_string(spec.generation) + "\n";
    (void)!::write(fd, banner.data(), banner.size());

    // Everything the child needs is built before fork: after it, only
    // async-signal-safe calls.
    // The job's and torchrun's variables replace the agent's own: getenv
    // returns the first match, so a duplicate would let the agent's win.
    std::map<std::string, std::string> mine = TorchrunEnv(spec, rank, local);
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
    std::vector<std::string> args = spec.argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fd);
      return Status::IOError(std::string("fork for rank ") + std::to_string(rank) + ": " + std::strerror(errno));
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
    live_[rank] = pid;
  }
  return Status::OK();
}

void Supervisor::StopAll(std::chrono::milliseconds grace) {
  if (live_.empty()) return;
  for (const auto& [rank, pid] : live_) {
    ::kill(pid, SIGTERM);
    ::kill(pid, SIGCONT);  // a stopped rank (fail-slow emulation) must run to hear it
  }
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!live_.empty()) {
    for (auto it = live_.begin(); it != live_.end();) {
      int status = 0;
      if (::waitpid(it->second, &status, WNOHANG) == it->second) {
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
    if (live_.empty()) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (const auto& [rank, pid] : live_) ::kill(pid, SIGKILL);
      for (const auto& [rank, pid] : live_) ::waitpid(pid, nullptr, 0);
      live_.clear();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<RankExit> Supervisor::Reap() {
  std::vector<RankExit> out;
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
