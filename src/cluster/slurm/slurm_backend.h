// The Slurm backend (cluster/backend.h): agents are Slurm tasks on the
// nodes of the allocation `bulwark up` ran in, machine ids are node names.
//
//   Drain(n)    scontrol update NodeName=n State=DRAIN Reason="bulwark incident 7: ...",
//               then n leaves the allocation (the job shrinks; a node that came
//               in its own job has that job cancelled), so Slurm shows it
//               DRAINED rather than draining under a live job
//   Resume(n)   State=RESUME if bulwark drained it; a new agent on n when its own is gone
//   Acquire(k)  agents on the allocation's spare nodes, then at most `grow`
//               more nodes as one-node jobs of their own
//
// One worker thread does all of it, in order, with a deadline on every
// command; a failed request is retried with backoff and a later request for
// the same node replaces an earlier one (desired state: the last word wins).
// The caller never waits.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "cluster/backend.h"
#include "cluster/layout.h"
#include "cluster/slurm/command.h"
#include "cluster/slurm/slurm_text.h"

namespace bulwark::cluster {

struct SlurmBackendOptions {
  double command_timeout_s = 20;  // one scontrol/squeue/sbatch call
  std::chrono::milliseconds first_retry{500};
  std::chrono::milliseconds max_retry{30000};
  int max_attempts = 20;  // then the request is logged as given up
};

// Starts `argv` detached with its output appended to `log` (an agent's srun
// outlives whoever started it); the default is SpawnCommandDetached.
using Spawner = std::function<Status(const std::vector<std::string>& argv, const std::string& log)>;

class SlurmBackend : public Backend {
 public:
  SlurmBackend(Layout layout, SlurmRecord record, std::unique_ptr<CommandRunner> runner, Spawner spawn, LogFn log,
               SlurmBackendOptions options = {});
  ~SlurmBackend() override;  // stops the worker; requests still pending are dropped
  SlurmBackend(const SlurmBackend&) = delete;
  SlurmBackend& operator=(const SlurmBackend&) = delete;

  void Drain(const std::string& machine, const std::string& reason) override;
  void Resume(const std::string& machine, bool start_agent) override;
  void Acquire(const std::string& request, int count) override;

  // True once nothing is pending (tests); false after `seconds`.
  bool WaitIdle(double seconds);

 private:
  enum class Kind { kDrain, kResume, kAcquire };
  struct Request {
    Kind kind;
    std::string machine, reason;
    bool start_agent = false;
    int count = 0;
    int stage = 0;  // how far it got: a retry resumes there
    int attempts = 0;
    std::chrono::steady_clock::time_point not_before{};
  };

  void Loop();
  // Carries `r` forward; OK when it is done, else the failure to retry on.
  Status Carry(Request& r);
  Status DrainNode(Request& r);
  Status ResumeNode(Request& r);
  Status AcquireNodes(Request& r);
  // Takes `node` out of the allocation or cancels the job that brought it.
  Status Release(const std::string& node);
  Status StartAgent(const std::string& node);
  Result<std::vector<std::string>> JobNodes(const std::string& job);
  Result<SlurmNode> ShowNode(const std::string& node);
  CommandResult Run(const std::vector<std::string>& argv);
  Status SubmitAgentJob(const std::string& node);

  const Layout layout_;
  const SlurmRecord record_;
  const std::unique_ptr<CommandRunner> runner_;
  const Spawner spawn_;
  const LogFn log_;
  const SlurmBackendOptions options_;

  std::mutex mu_;  // guards the four below
  std::condition_variable cv_;
  std::deque<Request> pending_;
  std::set<std::string> seen_requests_;
  bool busy_ = false;
  bool stop_ = false;

  // The worker's own (no lock): nodes given an agent so far, jobs it
  // submitted for nodes, and how many of those count against `grow`.
  std::set<std::string> agents_;
  std::vector<std::string> own_jobs_;
  int grown_ = 0;
  std::thread worker_;
};

}  // namespace bulwark::cluster
