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
// a report accepted again. Besides each report's round trip as the
// generator sees it, it reads the controller's own handling time (arrival
// to answer) from its /metrics (bulwark_report_handling_seconds) before and
// after the window: on 2 cores shared with the generator, the round trip
// also holds the generator's own waits. It prints figures; it judges nothing. With
// --jobs J the fleet runs J named jobs (plane/fleet.h, jobs.cc) and each
// fault lands in the job of the machine it strikes; --json prints the
// figures' JSON object alone on stdout.
//
//   bulwark bench-plane --agents 1000 [--jobs J] [--seconds 30] [--out /tmp/plane-bench] [--json]
//   (runs build/bin/bulwark-plane-bench --agents 1000 [--dir DIR] ...)
//
// The generator runs in this process (one completion-queue thread and one
// scheduling thread, all calls asynchronous); the controller's CPU comes
// from its own /proc/PID/stat, so the generator's is not in it, but both
// share this host's cores.
#include <absl/synchronization/mutex.h>
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
#include <cstdlib>
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
#include "controller_log.h"
#include "handling_histogram.h"
#include "host_probe.h"
#include "plane_bench.h"

namespace plane_bench {

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

void Bench::WaitForOneGeneration(double timeout_s) {
  const auto t0 = Clock::now();
  while (Secs(Clock::now() - t0) < timeout_s) {
    {
      std::lock_guard<std::mutex> l(mu_);
      std::map<int, int64_t> newest;  // each job's
      for (const Sim& s : sims_) newest[s.job] = std::max(newest[s.job], s.generation);
      const bool behind = std::any_of(sims_.begin(), sims_.end(), [&](const Sim& s) {
        return !s.silent && s.rank >= 0 && s.generation != newest[s.job];
      });
      if (!behind) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// A rank exits 1 (an uncaught exception): its agent reports at once, as a
// real one does when there is news. Decided when the controller logs the
// action it takes (a restart in place).
double Bench::CrashARank() {
  // After the silent machine's replacement has started everywhere: the
  // decision looked for is the crash's, not that restart's.
  WaitForOneGeneration(60);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  log_from_ = ReadAll(o_.dir + "/controller.log").size();
  const int victim = o_.agents / 3;
  int64_t crashed_ms;
  {
    std::lock_guard<std::mutex> l(mu_);
    crashed_ms = WallMs();
    CrashLocked(victim, crashed_ms);
  }
  // Its decision names the crashed rank's machine (other machines' actions,
  // a healthy one lost for the controller's lag included, are not it).
  const std::string on = " on " + sims_[victim].id;
  const LogLine d = WaitForLine(
      o_.dir + "/controller.log", log_from_,
      [&](const std::string& l) { return IsDecision(l) && l.find(on) != std::string::npos; }, 60);
  log_from_ = std::max(log_from_, d.end);
  const double decide = d.ms < 0 ? -1 : (d.ms - crashed_ms) / 1000.0;
  std::printf("crashed rank on %s: decided %.2f s after the crash (%s)\n", sims_[victim].id.c_str(), decide,
              d.text.substr(0, std::min<size_t>(d.text.size(), 160)).c_str());
  std::fflush(stdout);
  return decide;
}

// A hang: one rank stops computing and every rank's step stops with it (its
// peers wait in their next all-reduce). The policy's hang detector asks for
// every rank's stacks once the next step is overdue (its allowance, about 5x
// the learned step time); the stuck rank's stack stands out, and the
// verdict's action is the decision.
Bench::Hang Bench::StallARank() {
  WaitForOneGeneration(60);
  // Past the restart's warm-up steps (hang_warmup_steps), which get longer allowances.
  std::this_thread::sleep_for(std::chrono::seconds(8));
  const int victim = o_.agents / 4;
  int64_t due_ms;
  log_from_ = ReadAll(o_.dir + "/controller.log").size();
  {
    std::lock_guard<std::mutex> l(mu_);
    frozen_step_ = WallMs() / 1000;
    frozen_job_ = o_.jobs > 1 ? sims_[victim].job : -1;
    due_ms = (frozen_step_ + 1) * 1000;  // when the next step was due
    sims_[victim].stuck = true;
  }
  const std::string log = o_.dir + "/controller.log";
  Hang h;
  const LogLine asked = WaitForLine(
      log, log_from_, [](const std::string& l) { return l.find("hang suspected") != std::string::npos; }, 90);
  // The verdict is the stacks' (an eviction by stack aggregation, or a reattempt).
  const LogLine verdict =
      asked.ms < 0 ? LogLine{}
                   : WaitForLine(
                         log, asked.end,
                         [](const std::string& l) {
                           return IsDecision(l) && (l.find("stack") != std::string::npos ||
                                                    l.find("reattempt") != std::string::npos);
                         },
                         90);
  log_from_ = std::max({log_from_, asked.end, verdict.end});
  if (asked.ms >= 0) h.detect_s = (asked.ms - due_ms) / 1000.0;
  if (verdict.ms >= 0) h.decide_s = (verdict.ms - asked.ms) / 1000.0;
  std::printf("stuck rank on %s: hang suspected %.2f s after its step was due (%s); verdict %.2f s later (%s)\n",
              sims_[victim].id.c_str(), h.detect_s, asked.text.substr(0, std::min<size_t>(asked.text.size(), 120)).c_str(),
              h.decide_s, verdict.text.substr(0, std::min<size_t>(verdict.text.size(), 160)).c_str());
  {
    std::lock_guard<std::mutex> l(mu_);
    frozen_step_ = 0;
    sims_[victim].stuck = false;
  }
  std::fflush(stdout);
  return h;
}

std::vector<int> Bench::BlameLosses(const std::string& log_path, const std::string& victim) {
  std::vector<int> counts(3, 0);
  const std::string log = ReadAll(log_path);
  const std::string a = "event machine ", b = " lost its heartbeat (silent for ";
  for (size_t at = log.find(a); at != std::string::npos; at = log.find(a, at + 1)) {
    const size_t eol = log.find('\n', at), id_end = log.find(' ', at + a.size());
    const size_t sil = log.find(b, at);
    if (id_end == std::string::npos || sil == std::string::npos || sil > eol || sil != id_end) continue;
    const std::string id = log.substr(at + a.size(), id_end - at - a.size());
    const int i = std::atoi(id.c_str() + 1) - 1;
    if (id == victim || i < 0 || i >= static_cast<int>(sims_.size())) continue;
    const size_t bol = log.rfind('\n', at);
    const int64_t lost_ms = StampMs(log.c_str() + (bol == std::string::npos ? 0 : bol + 1));
    const int64_t silent_ms = static_cast<int64_t>(std::strtod(log.c_str() + sil + b.size(), nullptr) * 1000);
    Blame blame;
    {
      std::lock_guard<std::mutex> l(mu_);
      blame = BlameFor(sims_[i].sends, lost_ms, silent_ms);
    }
    ++counts[static_cast<int>(blame)];
    std::printf("  lost %s (silent %.3f s): %s\n", id.c_str(), silent_ms / 1000.0, BlameName(blame));
  }
  return counts;
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
  std::vector<std::thread> pollers;
  for (int q = 0; q < kQueues; ++q) {
    cqs_.push_back(std::make_unique<grpc::CompletionQueue>());
    pollers.emplace_back([this, q] { PollLoop(cqs_[q].get()); });
  }
  std::thread scheduler([this] { ScheduleLoop(); });
  auto registered = [&] {
    std::lock_guard<std::mutex> l(mu_);
    return std::count_if(sims_.begin(), sims_.end(), [](const Sim& s) { return s.last_ok_ms > 0; });
  };
  const auto reg0 = Clock::now();
  while (registered() < o_.agents && Secs(Clock::now() - reg0) < 300) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::printf("agents %d: %ld reporting after %.1f s; controller threads %d\n", o_.agents, registered(),
              Secs(Clock::now() - reg0), ReadProc(controller_).threads);
  // The controller takes a job only on machines it heard within its
  // heartbeat timeout: wait until every agent's last report was accepted
  // within the last 1.5 s (a generator starved by the host's other load
  // lags behind the first registrations).
  auto fresh = [&] {
    std::lock_guard<std::mutex> l(mu_);
    const int64_t now = WallMs();
    return std::count_if(sims_.begin(), sims_.end(), [&](const Sim& s) { return now - s.last_ok_ms < 1500; });
  };
  const auto fresh0 = Clock::now();
  while (fresh() < o_.agents && Secs(Clock::now() - fresh0) < 60) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::printf("every agent heard within 1.5 s after %.1f s more\n", Secs(Clock::now() - fresh0));
  std::fflush(stdout);

  const double submit_s = SubmitJobs();
  if (submit_s < 0 || !LearnJobs()) {
    kill(controller_, SIGKILL);
    std::_Exit(1);
  }
  auto started = [&] {
    std::lock_guard<std::mutex> l(mu_);
    return std::count_if(sims_.begin(), sims_.end(), [](const Sim& s) { return s.generation > 0; });
  };
  const auto sub0 = Clock::now();
  const int placed = PerJob() * o_.jobs;
  while (started() < placed && Secs(Clock::now() - sub0) < 120) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::printf("START_RANKS reached %ld of %d placed machines after %.1f s\n", started(), placed,
              Secs(Clock::now() - sub0));
  std::this_thread::sleep_for(std::chrono::seconds(5));  // settle

  // --- steady load -------------------------------------------------------
  const std::string db = o_.dir + "/controller.db";
  // The fleet's database and, with named jobs, each job's (jobs/NAME.db).
  auto dbs = [&] {
    std::vector<std::string> v = {db};
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(o_.dir + "/jobs", ec)) {
      if (e.path().extension() == ".db") v.push_back(e.path().string());
    }
    return v;
  };
  auto journal_bytes = [&] {
    int64_t n = 0;
    for (const std::string& d : dbs()) n += FileSize(d) + FileSize(d + "-wal");
    return n;
  };
  auto journal_rows = [&] {
    std::pair<int64_t, int64_t> sum{0, 0};
    for (const std::string& d : dbs()) {
      const auto r = JournalRows(d);
      sum = {sum.first + r.first, sum.second + r.second};
    }
    return sum;
  };
  TakeLatencies();
  reporting_ = true;
  const Proc p0 = ReadProc(controller_);
  rusage self0;
  getrusage(RUSAGE_SELF, &self0);
  const int64_t j0 = journal_bytes();
  const auto rows0 = journal_rows();
  const std::string metrics_url = Trim(ReadAll(o_.dir + "/controller.metrics"));
  const Buckets handled0 = HandlingBuckets(metrics_url);
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
  const auto rows1 = journal_rows();
  const Buckets handled1 = HandlingBuckets(metrics_url);
  const double handled_p50 = WindowQuantileMs(handled0, handled1, 0.5);
  const double handled_p99 = WindowQuantileMs(handled0, handled1, 0.99);
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
  std::printf("report handling in the controller (its /metrics, arrival to answer): p50 %.1f ms p99 %.1f ms\n",
              handled_p50, handled_p99);
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
  const std::string log_path = o_.dir + "/controller.log";
  const std::string needle = "machine " + sims_[victim].id + " lost its heartbeat";
  const LogLine lost = WaitForLine(log_path, 0, [&](const std::string& l) { return l.find(needle) != std::string::npos; }, 60);
  const double noticed = lost.ms < 0 ? -1 : (lost.ms - silent_since) / 1000.0;
  std::printf("silent machine %s: lost %.2f s after its last accepted report (heartbeat timeout 2 s)\n",
              sims_[victim].id.c_str(), noticed);
  std::fflush(stdout);
  log_from_ = lost.end;
  // One crash, or with named jobs one in each of up to 10 jobs at once:
  // the worst of them (-1 if any went undecided).
  std::vector<double> crashes = o_.jobs > 1 ? CrashInJobs(std::min(10, o_.jobs)) : std::vector<double>{CrashARank()};
  double crash_decide = *std::max_element(crashes.begin(), crashes.end());
  if (std::count(crashes.begin(), crashes.end(), -1.0) > 0) crash_decide = -1;
  const Hang hang = StallARank();

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
  // Every machine but the silenced one (and the stuck rank's, which the
  // hang's decision may evict) kept reporting: any other lost is the
  // controller's own lag held against a healthy agent.
  const int lost_lines = CountLines(log_path, "event machine ", " lost its heartbeat (silent");
  const int healthy_evicted = lost_lines - 1;
  double lag;
  int64_t lagged;
  {
    std::lock_guard<std::mutex> l(mu_);
    lag = worst_lag_s_;
    lagged = lagged_ticks_;
  }
  std::printf("healthy machines lost for silence: %d; the generator's worst lateness %.2f s (%ld of its 10 ms ticks "
              "over 1 s late)\n", healthy_evicted, lag, lagged);
  const std::vector<int> blame = BlameLosses(log_path, sims_[victim].id);
  std::printf("of them: %d after the generator itself was late for the agent (it really was silent), %d with a report "
              "sent and not heard, %d with the controller's answer too late for the next report\n",
              blame[0], blame[1], blame[2]);
  std::fprintf(o_.json_out, "%s{\"agents\": %d, \"jobs\": %d, \"healthy_evicted\": %d, \"decide_s\": %.2f, \"crash_decide_s\": %.2f, "
              "\"hang_detect_s\": %.2f, \"hang_decide_s\": %.2f, \"generator_cpu_cores\": %.2f, \"generator_lag_s\": %.2f, "
              "\"load\": \"%s\", \"controller_cpu_cores\": %.3f, \"controller_rss_mib\": %.0f, \"threads\": %d, "
              "\"report_p50_ms\": %.2f, \"report_p99_ms\": %.2f, \"handling_p50_ms\": %.2f, \"handling_p99_ms\": %.2f, \"evict_after_s\": %.2f, \"evict_after_lease_s\": %.2f, "
              "\"journal_mib_per_hour\": %.1f, \"replay_s\": %.2f, \"status_s\": %.3f, \"submit_s\": %.2f, "
              "\"evicted_generator_late\": %d, \"evicted_unheard\": %d, \"evicted_answer_late\": %d, "
              "\"crashed_jobs\": %zu, \"crash_decide_each_s\": %s, \"other_jobs_deciding\": %d}\n",
              o_.json ? "" : "JSON ", o_.agents, o_.jobs, healthy_evicted, crash_decide, crash_decide, hang.detect_s, hang.decide_s,
              (cpu(self1) - cpu(self0)) / window, lag, Trim(ReadAll("/proc/loadavg")).c_str(), (p1.cpu_s - p0.cpu_s) / window,
              peak.rss_mib, peak.threads, Percentile(lat, 0.5),
              Percentile(lat, 0.99), handled_p50, handled_p99, noticed, noticed < 0 ? -1.0 : noticed - 2.0,
              rows_per_s * row_bytes * 3600 / (1 << 20), reattached, status_worst, submit_s, blame[0], blame[1], blame[2],
              crashes.size(), JsonList(crashes).c_str(), other_job_decisions_);
  std::fflush(o_.json_out);
  std::fflush(stdout);

  // The generator's streams and calls die with the process.
  kill(controller_, SIGKILL);
  waitpid(controller_, nullptr, 0);
  std::fflush(stdout);
  std::_Exit(0);
  return 0;
}

}  // namespace plane_bench

int main(int argc, char** argv) {
  plane_bench::Options o;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--json") {
      o.json = true;
      continue;
    }
    const std::string v = i + 1 < argc ? argv[++i] : "";
    if (v.empty()) k.clear();
    if (k == "--agents") o.agents = std::stoi(v);
    else if (k == "--seconds") o.seconds = std::stoi(v);
    else if (k == "--dir") o.dir = v;
    else if (k == "--bulwark") o.bulwark = v;
    else if (k == "--channels") o.channels = std::stoi(v);
    else if (k == "--jobs") o.jobs = std::stoi(v);
    else {
      std::fprintf(stderr, "usage: bulwark-plane-bench [--agents N] [--jobs J] [--seconds S] [--dir DIR] [--bulwark PATH] "
                   "[--channels C] [--json]\n");
      return 2;
    }
  }
  if (o.jobs < 1 || o.agents < o.jobs + 1) {
    std::fprintf(stderr, "bulwark-plane-bench: --jobs J needs 1 <= J and at least J + 1 agents (one for the pool)\n");
    return 2;
  }
  if (o.json) {
    // The figures alone on stdout, for scripts; the running commentary on stderr.
    o.json_out = fdopen(dup(1), "w");
    dup2(2, 1);
  }
  signal(SIGPIPE, SIG_IGN);
  // As the controller does (plane/service.cc): Debian's Abseil is built
  // without NDEBUG, so every lock of gRPC's mutexes ran the deadlock
  // detector's graph, under one global lock, in the generator too.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return plane_bench::Bench(o).Run();
}
