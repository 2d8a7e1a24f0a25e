#include "cluster/slurm/slurm_backend.h"

#include <algorithm>
#include <cstdio>

#include "cluster/local/local_cluster.h"
#include "common/files.h"

namespace bulwark::cluster {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

Status AppendLine(const std::string& path, const std::string& line) {
  Result<std::string> old = ReadFile(path);
  return WriteFileAtomic(path, (old.ok() ? *old : "") + line + "\n");
}

}  // namespace

SlurmBackend::SlurmBackend(Layout layout, SlurmRecord record, std::unique_ptr<CommandRunner> runner, Spawner spawn,
                           LogFn log, SlurmBackendOptions options)
    : layout_(std::move(layout)),
      record_(std::move(record)),
      runner_(std::move(runner)),
      spawn_(spawn ? std::move(spawn) : Spawner(SpawnCommandDetached)),
      log_(std::move(log)),
      options_(options) {
  agents_.insert(record_.agents.begin(), record_.agents.end());
  // What an earlier controller started: agents on spare nodes, and jobs
  // still ours to release and cancel.
  if (Result<std::string> started = ReadFile(layout_.slurm_agents()); started.ok()) {
    for (const std::string& node : ParseLines(*started)) agents_.insert(node);
  }
  if (Result<std::string> jobs = ReadFile(layout_.slurm_jobs()); jobs.ok()) {
    for (const std::string& line : ParseLines(*jobs)) {
      const size_t sp = line.find(' ');
      own_jobs_.push_back(line.substr(0, sp));
      if (sp != std::string::npos && line.substr(sp + 1) == "grow") ++grown_;
    }
  }
  worker_ = std::thread([this] { Loop(); });
}

SlurmBackend::~SlurmBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void SlurmBackend::Drain(const std::string& machine, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  // The newest word on a node replaces what is still pending for it.
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const Request& r) { return r.kind != Kind::kAcquire && r.machine == machine; }),
                 pending_.end());
  pending_.push_back({Kind::kDrain, machine, reason});
  cv_.notify_all();
}

void SlurmBackend::Resume(const std::string& machine, bool start_agent) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const Request& r) { return r.kind != Kind::kAcquire && r.machine == machine; }),
                 pending_.end());
  Request r{Kind::kResume, machine, ""};
  r.start_agent = start_agent;
  pending_.push_back(std::move(r));
  cv_.notify_all();
}

void SlurmBackend::Acquire(const std::string& request, int count) {
  std::lock_guard<std::mutex> lock(mu_);
  if (count <= 0 || !seen_requests_.insert(request).second) return;
  Request r{Kind::kAcquire, "", request};
  r.count = count;
  pending_.push_back(std::move(r));
  cv_.notify_all();
}

bool SlurmBackend::WaitIdle(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)),
                      [&] { return pending_.empty() && !busy_; });
}

void SlurmBackend::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // The first request due; the queue stays in order otherwise, so a
    // node's drain and resume never overtake each other.
    auto now = std::chrono::steady_clock::now();
    auto due = std::find_if(pending_.begin(), pending_.end(), [&](const Request& r) { return r.not_before <= now; });
    if (due == pending_.end()) {
      cv_.notify_all();  // WaitIdle
      if (pending_.empty()) {
        cv_.wait(lock);
      } else {
        auto next = std::min_element(pending_.begin(), pending_.end(), [](const Request& a, const Request& b) {
                      return a.not_before < b.not_before;
                    })->not_before;
        cv_.wait_until(lock, next);
      }
      continue;
    }
    Request r = std::move(*due);
    pending_.erase(due);
    busy_ = true;
    lock.unlock();
    // Slurm is asked without the lock: Drain, Resume and Acquire never wait.
    const Status st = Carry(r);
    lock.lock();
    busy_ = false;
    if (st.ok()) continue;
    const std::string what = r.kind == Kind::kAcquire ? "acquire for " + r.reason
                             : r.kind == Kind::kDrain ? "drain " + r.machine
                                                      : "resume " + r.machine;
    // A newer request for the same node replaced this one while it ran.
    const bool replaced = r.kind != Kind::kAcquire && std::any_of(pending_.begin(), pending_.end(), [&](const Request& p) {
                            return p.kind != Kind::kAcquire && p.machine == r.machine;
                          });
    if (replaced) continue;
    if (++r.attempts >= options_.max_attempts) {
      log_("slurm: gave up on " + what + " after " + std::to_string(r.attempts) + " attempts: " + st.message() +
           "; do it by hand with scontrol");
      continue;
    }
    auto backoff = options_.first_retry * (1 << std::min(r.attempts - 1, 10));
    if (backoff > options_.max_retry) backoff = options_.max_retry;
    log_("slurm: " + what + " failed (attempt " + std::to_string(r.attempts) + "), retrying in " +
         std::to_string(backoff.count()) + " ms: " + st.message());
    r.not_before = std::chrono::steady_clock::now() + backoff;
    pending_.push_back(std::move(r));
  }
}

CommandResult SlurmBackend::Run(const std::vector<std::string>& argv) {
  return runner_->Run(argv, options_.command_timeout_s);
}

Status SlurmBackend::Carry(Request& r) {
  switch (r.kind) {
    case Kind::kDrain: return DrainNode(r);
    case Kind::kResume: return ResumeNode(r);
    case Kind::kAcquire: return AcquireNodes(r);
  }
  return Status::Internal("unknown request");
}

Status SlurmBackend::DrainNode(Request& r) {
  if (r.stage == 0) {
    // Drained by bulwark already (a restarted controller saying it again):
    // the first reason stays, it names the incident that did it.
    Result<SlurmNode> before = ShowNode(r.machine);
    if (!before.ok()) return before.status();
    if (!DrainedByBulwark(*before)) {
      const std::vector<std::string> argv = DrainArgv(r.machine, r.reason);
      CommandResult c = Run(argv);
      if (!c.ok()) return Status::Unavailable(c.Describe(argv));
      log_("slurm: drained " + r.machine + ": " + DrainReason(r.reason));
    }
    r.stage = 1;
  }
  if (r.stage == 1) {
    BULWARK_RETURN_IF_ERROR(Release(r.machine));
    agents_.erase(r.machine);
    r.stage = 2;
  }
  // Level check: Slurm says so, with bulwark's reason.
  Result<SlurmNode> n = ShowNode(r.machine);
  if (!n.ok()) return n.status();
  if (!DrainedByBulwark(*n)) {
    r.stage = 0;  // someone resumed it or changed the reason in between: drain again
    return Status::Unavailable("node " + r.machine + " shows State=" + n->state + " Reason=" + n->reason +
                               " after the drain");
  }
  return Status::OK();
}

Status SlurmBackend::ResumeNode(Request& r) {
  if (r.stage == 0) {
    Result<SlurmNode> n = ShowNode(r.machine);
    if (!n.ok()) return n.status();
    if (n->drain && !DrainedByBulwark(*n)) {
      log_("slurm: not resuming " + r.machine + ": drained by someone else (Reason=" + n->reason + ")");
      return Status::OK();
    }
    if (n->drain) {
      const std::vector<std::string> argv = ResumeArgv(r.machine);
      CommandResult c = Run(argv);
      if (!c.ok()) return Status::Unavailable(c.Describe(argv));
      log_("slurm: resumed " + r.machine);
    }
    r.stage = 1;
  }
  if (r.start_agent) BULWARK_RETURN_IF_ERROR(StartAgent(r.machine));
  return Status::OK();
}

Status SlurmBackend::AcquireNodes(Request& r) {
  while (r.count > 0) {
    Result<std::vector<std::string>> nodes = JobNodes(record_.job);
    if (!nodes.ok()) return nodes.status();
    std::string spare;
    for (const std::string& n : *nodes) {
      if (agents_.count(n) == 0) {
        spare = n;
        break;
      }
    }
    if (!spare.empty()) {
      BULWARK_RETURN_IF_ERROR(StartAgent(spare));
      log_("slurm: started an agent on spare node " + spare + " of job " + record_.job + " (" + r.reason + ")");
    } else if (grown_ < record_.grow) {
      BULWARK_RETURN_IF_ERROR(SubmitAgentJob(""));
      ++grown_;
    } else {
      log_("slurm: the standby pool stays " + std::to_string(r.count) + " short: job " + record_.job +
           " has no spare node and the " + std::to_string(record_.grow) +
           " node(s) 'bulwark up --grow' allows are taken; allocate more nodes or raise --grow");
      return Status::OK();
    }
    --r.count;
  }
  return Status::OK();
}

Status SlurmBackend::StartAgent(const std::string& node) {
  Result<std::vector<std::string>> nodes = JobNodes(record_.job);
  if (!nodes.ok()) return nodes.status();
  if (!Contains(*nodes, node)) return SubmitAgentJob(node);
  BULWARK_RETURN_IF_ERROR(MakeDirs(layout_.machine(node)));
  BULWARK_RETURN_IF_ERROR(spawn_(AgentStepArgv(record_, node), layout_.agent_log(node)));
  agents_.insert(node);
  BULWARK_RETURN_IF_ERROR(MakeDirs(layout_.slurm()));
  BULWARK_RETURN_IF_ERROR(AppendLine(layout_.slurm_agents(), node));
  return Status::OK();
}

Status SlurmBackend::SubmitAgentJob(const std::string& node) {
  BULWARK_RETURN_IF_ERROR(MakeDirs(layout_.slurm()));
  const std::vector<std::string> argv = AgentJobArgv(record_, layout_.slurm() + "/job-%j.log", node);
  CommandResult c = Run(argv);
  if (!c.ok()) return Status::Unavailable(c.Describe(argv));
  Result<std::string> job = ParseSubmittedJob(c.out);
  if (!job.ok()) return job.status();
  own_jobs_.push_back(*job);
  // Recorded for `bulwark down` and for a restarted controller.
  BULWARK_RETURN_IF_ERROR(AppendLine(layout_.slurm_jobs(), *job + (node.empty() ? " grow" : " return")));
  if (!node.empty()) agents_.insert(node);
  log_("slurm: submitted job " + *job + " for an agent on " + (node.empty() ? "a new node" : node));
  return Status::OK();
}

Status SlurmBackend::Release(const std::string& node) {
  if (node == record_.batch_host) {
    log_("slurm: " + node + " runs job " + record_.job + "'s batch script and stays in it (draining, not drained)");
    return Status::OK();
  }
  Result<std::vector<std::string>> nodes = JobNodes(record_.job);
  if (!nodes.ok()) return nodes.status();
  if (Contains(*nodes, node)) {
    std::vector<std::string> keep;
    for (const std::string& n : *nodes) {
      if (n != node) keep.push_back(n);
    }
    const std::vector<std::string> argv = ShrinkArgv(record_.job, keep);
    CommandResult c = Run(argv);
    if (!c.ok()) return Status::Unavailable(c.Describe(argv));
    log_("slurm: released " + node + " from job " + record_.job);
    return Status::OK();
  }
  for (const std::string& job : own_jobs_) {
    Result<std::vector<std::string>> held = JobNodes(job);
    if (!held.ok()) return held.status();
    if (!Contains(*held, node)) continue;
    const std::vector<std::string> argv = {"scancel", job};
    CommandResult c = Run(argv);
    if (!c.ok()) return Status::Unavailable(c.Describe(argv));
    log_("slurm: cancelled job " + job + " that held " + node);
  }
  return Status::OK();
}

Result<std::vector<std::string>> SlurmBackend::JobNodes(const std::string& job) {
  const std::vector<std::string> argv = {"squeue", "--noheader", "--jobs=" + job, "--format=%N"};
  CommandResult c = Run(argv);
  // A job that has ended holds nothing.
  if (!c.ok() && c.err.find("Invalid job id") != std::string::npos) return std::vector<std::string>{};
  if (!c.ok()) return Status::Unavailable(c.Describe(argv));
  std::vector<std::string> lists = ParseLines(c.out);
  if (lists.empty()) return std::vector<std::string>{};  // pending, or gone
  const std::vector<std::string> expand = {"scontrol", "show", "hostnames", lists.front()};
  CommandResult h = Run(expand);
  if (!h.ok()) return Status::Unavailable(h.Describe(expand));
  return ParseLines(h.out);
}

Result<SlurmNode> SlurmBackend::ShowNode(const std::string& node) {
  const std::vector<std::string> argv = {"scontrol", "--oneliner", "show", "node", node};
  CommandResult c = Run(argv);
  if (!c.ok()) return Status::Unavailable(c.Describe(argv));
  return ParseNodeLine(c.out);
}

}  // namespace bulwark::cluster
