// The plane bench's parts (bench/plane): the simulated agents
// (generator.cc: register, hold a command stream, report, answer commands as
// an agent would) and the run that drives the controller through load,
// faults and a restart (plane_bench.cc).
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bulwark.grpc.pb.h"
#include "eviction_blame.h"

namespace plane_bench {
using Clock = std::chrono::steady_clock;
namespace w = bulwark::wire;

inline double Secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
struct Options {
  std::string bulwark = "build/bin/bulwark";
  std::string dir = "/tmp/bulwark-plane-bench";
  int agents = 100;
  int seconds = 30;
  int channels = 0;  // 0: one per 200 agents
  // Jobs on the fleet: 1, the single job of every machine but one; J > 1,
  // J named jobs of (agents - 1) / J machines each, the rest the fleet's
  // pool (plane/fleet.h).
  int jobs = 1;
  bool json = false;  // stdout: the figures' JSON object alone; the rest to stderr
  FILE* json_out = stdout;
};


// One Commands stream: lives until its Finish completes, whatever the
// agent does meanwhile (a new stream gets a new one).
struct Stream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientAsyncReader<w::Command>> reader;
  w::Command cmd;
  grpc::Status status;
};

// One completion-queue tag: what finished.
struct Op {
  enum Kind { kRegister, kStreamStart, kStreamRead, kStreamFinish, kReport, kStacks };
  Op(Kind k, int a) : kind(k), agent(a), start(Clock::now()) {}
  Kind kind;
  int agent = 0;
  Clock::time_point start;
  grpc::ClientContext ctx;
  w::RegisterReply reg_reply;
  w::ReportReply reply;
  w::StacksReply stacks_reply;
  grpc::Status status;
  Stream* stream = nullptr;
};

struct Sim {
  std::string id;
  int64_t incarnation = 0;
  int64_t seq = 0;
  int64_t acked = 0;
  int64_t generation = 0;
  int rank = -1;  // its rank in `generation`, from START_RANKS; -1 none (a standby)
  int job = 0;    // the job holding it, as the controller's status says; -1 the pool
  bool registered = false;
  bool silent = false;
  bool report_in_flight = false;
  bool register_in_flight = false;  // as an agent, one Register at a time (a resend each second piled up 30 per agent)
  bool stream_open = false;
  int64_t last_ok_ms = 0;  // wall ms of the last accepted report
  // Injected faults: its rank crashed (no rank runs until a START_RANKS),
  // or its rank is the one stuck in a hang (its stack stands out).
  bool crashed = false;
  bool stuck = false;
  // Events sent with every report until acknowledged, as an agent's are: a
  // crash's RANK_EXITED, DIAGNOSTICS answers.
  std::vector<w::AgentEvent> pending;
  // News (a crash) came while a report was in flight: the next goes as soon
  // as that one is answered, as an agent's does, not at the next second.
  bool news = false;
  Stream* stream = nullptr;  // the open one, owned by its pending op
  // Its reports, when sent and answered (wall ms): whose lateness its loss
  // for silence was, if the controller loses it (eviction_blame.h).
  std::vector<Send> sends;
};

class Bench {
 public:
  explicit Bench(Options o) : o_(std::move(o)) {}

  int Run();

 private:
  bool StartController(bool init);
  void ConnectChannels();
  w::AgentService::Stub& StubFor(int agent) { return *stubs_[agent % stubs_.size()]; }
  void Prepare(grpc::ClientContext& ctx, int deadline_ms) {
    ctx.AddMetadata("x-bulwark-token", token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  }
  void SendRegister(int i);
  void OpenStream(int i);
  void SendReport(int i);
  void Answer(int i, const w::Command& c);
  // Injections after the silent machine (their decisions read from the
  // controller's log after byte log_from_): fault -> decision, seconds.
  double CrashARank();
  // Sim i's rank exits 1 at `at_ms`; its agent reports at once, as a real
  // one does with news (under mu_).
  void CrashLocked(int i, int64_t at_ms);
  // With named jobs: a rank crashes in each of `count` jobs at the same
  // moment; each job's fault -> its own decision, seconds (-1 none in time).
  std::vector<double> CrashInJobs(int count);
  struct Hang {
    double detect_s = -1;  // the next step's due time -> hang suspected (the allowance, about 5 s)
    double decide_s = -1;  // suspected -> the verdict's action (every rank's stacks gathered and read)
  };
  Hang StallARank();
  // Every machine but `victim` that the controller's log says was lost for
  // silence, counted by whose lateness it was (eviction_blame.h), each
  // printed with its silence.
  std::vector<int> BlameLosses(const std::string& log_path, const std::string& victim);
  // Waits until every placed agent runs the newest generation a START_RANKS named.
  void WaitForOneGeneration(double timeout_s);
  // Submits the job or jobs (jobs.cc), each retried as a user would while
  // too few agents were heard; the slowest submit's seconds, -1 refused.
  double SubmitJobs();
  int PerJob() const { return (o_.agents - 1) / o_.jobs; }
  // Which job holds each machine, read from the controller's status.
  bool LearnJobs();
  // Drains one completion queue (each has its own thread).
  void PollLoop(grpc::CompletionQueue* cq);
  // Agent i's calls complete on queue i % kQueues: Debian's libgrpc is built
  // without NDEBUG, so every completion searches its queue's outstanding
  // tags linearly (cq_check_tag), and one queue holding 12,500 open
  // streams' reads made that search the generator's hottest loop.
  static constexpr int kQueues = 8;
  grpc::CompletionQueue* CqFor(int agent) { return cqs_[agent % kQueues].get(); }
  void ScheduleLoop();
  std::vector<double> TakeLatencies() {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<double> v;
    v.swap(latencies_ms_);
    return v;
  }

  Options o_;
  std::string token_, addr_;
  pid_t controller_ = -1;
  std::vector<std::unique_ptr<w::AgentService::Stub>> stubs_;
  std::unique_ptr<w::ControlService::Stub> control_;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> cqs_;
  std::mutex mu_;
  std::vector<Sim> sims_;
  std::vector<double> latencies_ms_;
  int64_t report_errors_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> reporting_{false};
  // A hang: every rank's step stops at this one (0: none), as a stuck rank
  // stops its peers in their next collective.
  int64_t frozen_step_ = 0;
  int frozen_job_ = -1;  // the job whose ranks the hang stops; -1 every job
  // The scheduler's worst lateness since the job's submit, and its 10 ms
  // ticks more than 1 s late (ScheduleLoop).
  double worst_lag_s_ = 0;
  int64_t lagged_ticks_ = 0;
  size_t log_from_ = 0;
  int other_job_decisions_ = 0;  // jobs not crashed that decided during CrashInJobs
};

}  // namespace plane_bench
