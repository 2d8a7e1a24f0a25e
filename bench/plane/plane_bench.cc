// bulwark-plane-bench: the real controller process (`bulwark controller`)
// driven by N simulated agents over the real gRPC API (issue 36).
//
// Each simulated agent registers, holds an open Commands stream (and opens
// it again when it ends) and reports about once a second: its live rank, the
// generation its last START_RANKS named, one step signal for its rank, and
// (machine 0 only, as rank 0's agent) a STEP event. After a warm-up the
// bench measures for --seconds, then silences one agent (it stops reporting
// and its stream is cancelled, a machine-down) and times until the
// controller logs it lost, then SIGKILLs the controller, starts it again on
// the same journal and times until it answers and until every agent has had
// a report accepted again. It prints figures; it judges nothing.
//
//   cmake --build build --target bulwark bulwark-plane-bench
//   build/bin/bulwark-plane-bench --agents 1000 [--seconds 30] [--dir /tmp/plane-bench]
//
// The generator runs in this process (one completion-queue thread and one
// scheduling thread, all calls asynchronous); the controller's CPU comes
// from its own /proc/PID/stat, so the generator's is not in it, but both
// share this host's cores.
#include <grpcpp/grpcpp.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bulwark.grpc.pb.h"
#include "host_probe.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace w = bulwark::wire;
using namespace plane_bench;  // host_probe.h

double Secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
struct Options {
  std::string bulwark = "build/bin/bulwark";
  std::string dir = "/tmp/bulwark-plane-bench";
  int agents = 100;
  int seconds = 30;
  int channels = 0;  // 0: one per 200 agents
};

class Bench;

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
  enum Kind { kRegister, kStreamStart, kStreamRead, kStreamFinish, kReport };
  Op(Kind k, int a) : kind(k), agent(a), start(Clock::now()) {}
  Kind kind;
  int agent = 0;
  Clock::time_point start;
  grpc::ClientContext ctx;
  w::RegisterReply reg_reply;
  w::ReportReply reply;
  grpc::Status status;
  Stream* stream = nullptr;
};

struct Sim {
  std::string id;
  int64_t incarnation = 0;
  int64_t seq = 0;
  int64_t acked = 0;
  int64_t generation = 0;
  bool registered = false;
  bool silent = false;
  bool report_in_flight = false;
  bool register_in_flight = false;  // as an agent, one Register at a time (a resend each second piled up 30 per agent)
  bool stream_open = false;
  int64_t last_ok_ms = 0;  // wall ms of the last accepted report
  Stream* stream = nullptr;  // the open one, owned by its pending op
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
  void PollLoop();
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
  grpc::CompletionQueue cq_;
  std::mutex mu_;
  std::vector<Sim> sims_;
  std::vector<double> latencies_ms_;
  int64_t report_errors_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> reporting_{false};
};

bool Bench::StartController(bool init) {
  std::vector<std::string> args = {o_.bulwark, "controller", "--dir", o_.dir};
  if (init) args.insert(args.begin() + 2, "--init");
  std::remove((o_.dir + "/controller.pid").c_str());
  // posix_spawn, not fork: this process runs gRPC's threads.
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string log = o_.dir + "/controller.log";
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return false;
  controller_ = pid;
  for (int i = 0; i < 3000; ++i) {
    if (std::filesystem::exists(o_.dir + "/controller.pid")) {
      addr_ = Trim(ReadAll(o_.dir + "/controller.addr"));
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void Bench::ConnectChannels() {
  stubs_.clear();
  const int n = o_.channels > 0 ? o_.channels : std::max(1, o_.agents / 200);
  for (int c = 0; c < n; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("bulwark.bench.channel", c);  // distinct args: a connection of its own
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    stubs_.push_back(w::AgentService::NewStub(grpc::CreateCustomChannel(addr_, grpc::InsecureChannelCredentials(), args)));
  }
  grpc::ChannelArguments control_args;
  control_args.SetMaxReceiveMessageSize(-1);  // as the CLI's: a fleet's status passes 4 MiB
  control_ = w::ControlService::NewStub(grpc::CreateCustomChannel(addr_, grpc::InsecureChannelCredentials(), control_args));
}

void Bench::SendRegister(int i) {
  auto* op = new Op(Op::kRegister, i);
  sims_[i].register_in_flight = true;
  Prepare(op->ctx, 30000);
  w::RegisterRequest req;
  req.set_machine(sims_[i].id);
  req.set_machine_dir(o_.dir + "/machines/" + sims_[i].id);
  req.set_incarnation(sims_[i].incarnation);
  auto rpc = StubFor(i).AsyncRegister(&op->ctx, req, &cq_);
  rpc->Finish(&op->reg_reply, &op->status, op);
}

void Bench::OpenStream(int i) {
  Sim& s = sims_[i];
  auto* st = new Stream;
  st->ctx.AddMetadata("x-bulwark-token", token_);
  w::CommandStreamRequest req;
  req.set_machine(s.id);
  req.set_incarnation(s.incarnation);
  auto* op = new Op(Op::kStreamStart, i);
  op->stream = st;
  st->reader = StubFor(i).PrepareAsyncCommands(&st->ctx, req, &cq_);
  s.stream = st;
  s.stream_open = true;
  st->reader->StartCall(op);
}

void Bench::SendReport(int i) {
  Sim& s = sims_[i];
  auto* op = new Op(Op::kReport, i);
  Prepare(op->ctx, 10000);
  w::ReportRequest req;
  req.set_machine(s.id);
  req.set_incarnation(s.incarnation);
  req.set_generation(s.generation);
  const int64_t now = WallMs();
  const int64_t step = now / 1000;  // one step a second, the same on every machine
  if (s.generation > 0) {
    req.add_live_ranks(i);
    w::RankSignal* sig = req.add_signals();
    sig->set_rank(i);
    sig->set_step(step);
    sig->set_steps(1);
    sig->set_loss(2.0);
    sig->set_grad_norm(1.0);
    sig->set_local_grad_norm(1.0);
    sig->set_step_ms(1000);
    sig->set_compute_ms(800);
    sig->set_comm_ms(200);
    sig->set_observed_ms(now);
    sig->set_generation(s.generation);
    sig->set_tokens(4096);
    if (i == 0) {
      w::AgentEvent* e = req.add_events();
      e->set_kind(w::AgentEvent::STEP);
      e->set_seq(++s.seq);
      e->set_step(step);
      e->set_observed_ms(now);
      e->set_generation(s.generation);
    }
  }
  s.report_in_flight = true;
  auto rpc = StubFor(i).AsyncReport(&op->ctx, req, &cq_);
  rpc->Finish(&op->reply, &op->status, op);
}

void Bench::PollLoop() {
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) {
    Op* op = static_cast<Op*>(tag);
    std::lock_guard<std::mutex> l(mu_);
    Sim& s = sims_[op->agent];
    switch (op->kind) {
      case Op::kRegister:
        s.register_in_flight = false;
        if (op->status.ok()) {
          s.registered = true;
          if (!s.stream_open) OpenStream(op->agent);
        } else if (!stop_) {
          std::fprintf(stderr, "register %s: %s\n", s.id.c_str(), op->status.error_message().c_str());
        }
        delete op;
        break;
      case Op::kStreamStart:
      case Op::kStreamRead: {
        Stream* st = op->stream;
        if (op->kind == Op::kStreamRead && ok && st->cmd.kind() == w::Command::START_RANKS) {
          s.generation = st->cmd.generation();
        }
        if (ok) {
          op->kind = Op::kStreamRead;
          st->reader->Read(&st->cmd, op);
        } else {
          op->kind = Op::kStreamFinish;
          st->reader->Finish(&st->status, op);
        }
        break;
      }
      case Op::kStreamFinish:
        // A stream the controller ended (a restart): the next report
        // round reopens it, as an agent's loop would.
        if (s.stream == op->stream) {
          s.stream = nullptr;
          s.stream_open = false;
        }
        delete op->stream;
        delete op;
        break;
      case Op::kReport: {
        s.report_in_flight = false;
        if (op->status.ok()) {
          s.acked = op->reply.acked_seq();
          s.last_ok_ms = WallMs();
          if (reporting_) latencies_ms_.push_back(Secs(Clock::now() - op->start) * 1000);
        } else {
          ++report_errors_;
          if (op->status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
            s.registered = false;  // "register first"
          }
        }
        delete op;
        break;
      }
    }
  }
}

// Each agent reports once a second at its own offset in the second.
void Bench::ScheduleLoop() {
  const auto t0 = Clock::now();
  int64_t tick = 0;
  const int64_t slots = 100;  // 10 ms slots
  while (!stop_) {
    const auto at = t0 + std::chrono::milliseconds(10 * tick);
    std::this_thread::sleep_until(at);
    const int slot = static_cast<int>(tick % slots);
    std::lock_guard<std::mutex> l(mu_);
    for (int i = slot; i < static_cast<int>(sims_.size()); i += slots) {
      Sim& s = sims_[i];
      if (s.silent) continue;
      if (!s.registered) {
        if (!s.report_in_flight && !s.register_in_flight && tick % 100 == slot) SendRegister(i);
        continue;
      }
      if (!s.stream_open) OpenStream(i);
      if (!s.report_in_flight) SendReport(i);
    }
    ++tick;
  }
}

int Bench::Run() {
  std::filesystem::remove_all(o_.dir);
  std::filesystem::create_directories(o_.dir);
  {
    std::random_device rd;
    char buf[33];
    std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
    token_ = buf;
    std::ofstream(o_.dir + "/token") << token_ << "\n";
    std::filesystem::permissions(o_.dir + "/token", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    std::ofstream(o_.dir + "/controller.addr") << "127.0.0.1:0\n";
  }
  if (!StartController(true)) {
    std::fprintf(stderr, "controller did not start; see %s/controller.log\n", o_.dir.c_str());
    return 1;
  }
  ConnectChannels();
  for (int i = 0; i < o_.agents; ++i) {
    char id[16];
    std::snprintf(id, sizeof id, "m%05d", i + 1);
    Sim s;
    s.id = id;
    s.incarnation = WallMs() * 100 + i;
    sims_.push_back(std::move(s));
  }
  std::thread poller([this] { PollLoop(); });
  std::thread scheduler([this] { ScheduleLoop(); });
  auto registered = [&] {
    std::lock_guard<std::mutex> l(mu_);
    return std::count_if(sims_.begin(), sims_.end(), [](const Sim& s) { return s.last_ok_ms > 0; });
  };
  const auto reg0 = Clock::now();
  while (registered() < o_.agents && Secs(Clock::now() - reg0) < 300) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::printf("agents %d: %ld reporting after %.1f s; controller threads %d\n", o_.agents, registered(),
              Secs(Clock::now() - reg0), ReadProc(controller_).threads);
  std::fflush(stdout);

  // The job: every machine but one (a standby), one rank each.
  double submit_s = -1;
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-bulwark-token", token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    w::SubmitRequest req;
    req.set_name("plane-bench");
    req.set_world_size(o_.agents - 1);
    req.set_ranks_per_machine(1);
    req.add_argv("/bin/sleep");
    req.add_argv("infinity");
    req.set_durable_dir(o_.dir + "/durable");
    w::SubmitReply reply;
    const auto t = Clock::now();
    grpc::Status st = control_->Submit(&ctx, req, &reply);
    submit_s = Secs(Clock::now() - t);
    std::printf("submit: %s in %.2f s\n", st.ok() ? "ok" : st.error_message().c_str(), submit_s);
    if (!st.ok()) { kill(controller_, SIGKILL); std::fflush(stdout); std::_Exit(1); }
  }
  auto started = [&] {
    std::lock_guard<std::mutex> l(mu_);
    return std::count_if(sims_.begin(), sims_.end(), [](const Sim& s) { return s.generation > 0; });
  };
  const auto sub0 = Clock::now();
  while (started() < o_.agents - 1 && Secs(Clock::now() - sub0) < 120) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::printf("START_RANKS reached %ld of %d placed machines after %.1f s\n", started(), o_.agents - 1,
              Secs(Clock::now() - sub0));
  std::this_thread::sleep_for(std::chrono::seconds(5));  // settle

  // --- steady load -------------------------------------------------------
  const std::string db = o_.dir + "/controller.db";
  auto journal_bytes = [&] { return FileSize(db) + FileSize(db + "-wal"); };
  TakeLatencies();
  reporting_ = true;
  const Proc p0 = ReadProc(controller_);
  rusage self0;
  getrusage(RUSAGE_SELF, &self0);
  const int64_t j0 = journal_bytes();
  const auto rows0 = JournalRows(db);
  const auto w0 = Clock::now();
  Proc peak;
  double status_worst = 0;
  while (Secs(Clock::now() - w0) < o_.seconds) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    Proc p = ReadProc(controller_);
    peak.rss_mib = std::max(peak.rss_mib, p.rss_mib);
    peak.threads = std::max(peak.threads, p.threads);
  }
  const double window = Secs(Clock::now() - w0);
  const Proc p1 = ReadProc(controller_);
  rusage self1;
  getrusage(RUSAGE_SELF, &self1);
  const int64_t j1 = journal_bytes();
  const auto rows1 = JournalRows(db);
  reporting_ = false;
  std::vector<double> lat = TakeLatencies();
  // bulwark status, over the same API the CLI uses
  std::vector<double> status_s;
  for (int k = 0; k < 3; ++k) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    w::QueryRequest q;
    w::JsonReply r;
    const auto t = Clock::now();
    grpc::Status st = control_->Status(&ctx, q, &r);
    status_s.push_back(st.ok() ? Secs(Clock::now() - t) : -1);
    if (!st.ok()) std::printf("status failed: %s\n", st.error_message().c_str());
    else if (k == 0) std::printf("status: %.1f MiB of JSON\n", r.json().size() / 1048576.0);
    status_worst = std::max(status_worst, status_s.back());
  }
  auto cpu = [](const rusage& r) {
    return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
  };
  int64_t errors;
  {
    std::lock_guard<std::mutex> l(mu_);
    errors = report_errors_;
  }
  std::printf("steady %.0f s: %zu reports (%.0f/s), errors %ld; report round trip p50 %.1f ms p99 %.1f ms max %.1f ms\n",
              window, lat.size(), lat.size() / window, errors, Percentile(lat, 0.5), Percentile(lat, 0.99),
              Percentile(lat, 1.0));
  std::printf("controller: %.2f cores, RSS %.0f MiB (peak %.0f), threads %d (peak %d); generator %.2f cores\n",
              (p1.cpu_s - p0.cpu_s) / window, p1.rss_mib, peak.rss_mib, p1.threads, peak.threads,
              (cpu(self1) - cpu(self0)) / window);
  const double rows_per_s = (rows1.first - rows0.first) / window;
  const double row_bytes = rows1.first > 0 ? static_cast<double>(rows1.second) / rows1.first : 0;
  std::printf("journal: %.1f rows/s of %.0f B each = %.1f MiB of records per hour (file grew %.1f KiB in the window; "
              "compaction drops step rows every 20,000)\n",
              rows_per_s, row_bytes, rows_per_s * row_bytes * 3600 / (1 << 20), (j1 - j0) / 1024.0);
  std::printf("status: %.3f / %.3f / %.3f s\n", status_s[0], status_s[1], status_s[2]);
  std::fflush(stdout);

  // --- a silent machine ---------------------------------------------------
  // The standby is the last machine; silence a placed one, the middle one.
  const int victim = o_.agents / 2;
  int64_t silent_since;
  {
    std::lock_guard<std::mutex> l(mu_);
    sims_[victim].silent = true;
    if (sims_[victim].stream) sims_[victim].stream->ctx.TryCancel();
    silent_since = sims_[victim].last_ok_ms;
  }
  const std::string needle = "machine " + sims_[victim].id + " lost its heartbeat";
  const auto s0 = Clock::now();
  double noticed = -1;
  while (Secs(Clock::now() - s0) < 60) {
    std::string log = ReadAll(o_.dir + "/controller.log");
    const size_t at = log.find(needle);
    if (at != std::string::npos) {
      // The line's own stamp: "YYYY-MM-DD HH:MM:SS.mmm" at the line's start.
      const size_t bol = log.rfind('\n', at) + 1;
      std::tm tm{};
      int ms = 0;
      if (sscanf(log.c_str() + bol, "%d-%d-%d %d:%d:%d.%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                 &tm.tm_min, &tm.tm_sec, &ms) == 7) {
        tm.tm_year -= 1900;
        tm.tm_mon -= 1;
        const int64_t line_ms = static_cast<int64_t>(timegm(&tm)) * 1000 + ms;
        noticed = (line_ms - silent_since) / 1000.0;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("silent machine %s: lost %.2f s after its last accepted report (heartbeat timeout 2 s)\n",
              sims_[victim].id.c_str(), noticed);
  std::fflush(stdout);

  // --- SIGKILL and replay ---------------------------------------------------
  const int64_t jbytes = journal_bytes();
  kill(controller_, SIGKILL);
  waitpid(controller_, nullptr, 0);
  const int64_t killed_ms = WallMs();
  const auto k0 = Clock::now();
  if (!StartController(false)) {
    std::printf("restarted controller did not come up\n");
    { kill(controller_, SIGKILL); std::fflush(stdout); std::_Exit(1); }
  }
  const double listening = Secs(Clock::now() - k0);
  double answering = -1;
  for (int k = 0; k < 600 && answering < 0 && Secs(Clock::now() - k0) < 60; ++k) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    w::QueryRequest q;
    w::JsonReply r;
    if (control_->Status(&ctx, q, &r).ok()) answering = Secs(Clock::now() - k0);
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("restart: listening after %.2f s, status answered after %.2f s\n", listening, answering);
  std::fflush(stdout);
  double reattached = -1;
  int64_t behind = 0;
  while (Secs(Clock::now() - k0) < 60) {
    behind = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (const Sim& s : sims_) behind += !s.silent && s.last_ok_ms <= killed_ms;
    }
    if (behind == 0) {
      reattached = Secs(Clock::now() - k0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (reattached < 0) std::printf("%ld agents had no report accepted 60 s after the restart\n", behind);
  std::printf("SIGKILL at a %.1f MiB journal: restarted controller listening after %.2f s, answering status after "
              "%.2f s, every agent's report accepted again after %.2f s\n",
              jbytes / 1048576.0, listening, answering, reattached);
  std::printf("JSON {\"agents\": %d, \"controller_cpu_cores\": %.3f, \"controller_rss_mib\": %.0f, \"threads\": %d, "
              "\"report_p50_ms\": %.2f, \"report_p99_ms\": %.2f, \"evict_after_s\": %.2f, \"evict_after_lease_s\": %.2f, "
              "\"journal_mib_per_hour\": %.1f, \"replay_s\": %.2f, \"status_s\": %.3f, \"submit_s\": %.2f}\n",
              o_.agents, (p1.cpu_s - p0.cpu_s) / window, peak.rss_mib, peak.threads, Percentile(lat, 0.5),
              Percentile(lat, 0.99), noticed, noticed < 0 ? -1.0 : noticed - 2.0,
              rows_per_s * row_bytes * 3600 / (1 << 20), reattached, status_worst, submit_s);
  std::fflush(stdout);

  // The generator's streams and calls die with the process.
  kill(controller_, SIGKILL);
  waitpid(controller_, nullptr, 0);
  std::fflush(stdout);
  std::_Exit(0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--agents") o.agents = std::stoi(v);
    else if (k == "--seconds") o.seconds = std::stoi(v);
    else if (k == "--dir") o.dir = v;
    else if (k == "--bulwark") o.bulwark = v;
    else if (k == "--channels") o.channels = std::stoi(v);
    else {
      std::fprintf(stderr, "usage: bulwark-plane-bench [--agents N] [--seconds S] [--dir DIR] [--bulwark PATH] [--channels C]\n");
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  return Bench(o).Run();
}
