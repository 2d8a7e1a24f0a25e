// The plane bench's jobs: the one job of every machine but a standby, or J
// named jobs that share the fleet's pool (plane/fleet.h), submitted over the
// API the CLI uses; and faults in several of them at once.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include "controller_log.h"
#include "plane_bench.h"

namespace plane_bench {

double Bench::SubmitJobs() {
  {
    std::lock_guard<std::mutex> l(mu_);
    worst_lag_s_ = 0;
    lagged_ticks_ = 0;
  }
  double slowest = 0;
  for (int j = 0; j < o_.jobs; ++j) {
    // The controller refuses a job while fewer agents than it needs were
    // heard within its heartbeat lease; a job that needs all but one is
    // refused for a second late agent: submitted again, as a user would,
    // up to 10 times a second apart (each try printed).
    for (int attempt = 1;; ++attempt) {
      grpc::ClientContext ctx;
      ctx.AddMetadata("x-bulwark-token", token_);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      w::SubmitRequest req;
      req.set_name(o_.jobs == 1 ? "plane-bench" : "plane-bench-" + std::to_string(j));
      req.set_named(o_.jobs > 1);
      req.set_world_size(PerJob());
      req.set_ranks_per_machine(1);
      req.add_argv("/bin/sleep");
      req.add_argv("infinity");
      req.set_durable_dir(o_.dir + "/durable");
      w::SubmitReply reply;
      const auto t = Clock::now();
      grpc::Status st = control_->Submit(&ctx, req, &reply);
      const double took = Secs(Clock::now() - t);
      if (!st.ok() || j == 0 || j + 1 == o_.jobs) {
        std::printf("submit %s (try %d): %s in %.2f s\n", req.name().c_str(), attempt,
                    st.ok() ? "ok" : st.error_message().c_str(), took);
        std::fflush(stdout);
      }
      if (st.ok()) {
        slowest = std::max(slowest, took);
        break;
      }
      if (attempt == 10) return -1;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  return slowest;
}

bool Bench::LearnJobs() {
  if (o_.jobs == 1) return true;  // every sim's job is 0; the standby never gets a rank
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-bulwark-token", token_);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  w::QueryRequest q;
  w::JsonReply r;
  if (grpc::Status st = control_->Status(&ctx, q, &r); !st.ok()) {
    std::printf("status (which job holds each machine): %s\n", st.error_message().c_str());
    return false;
  }
  std::ofstream(o_.dir + "/status-after-submit.json") << r.json();
  const nlohmann::json status = nlohmann::json::parse(r.json(), nullptr, false);
  if (status.is_discarded() || !status.contains("machines")) {
    std::printf("status (which job holds each machine): no machines in its JSON\n");
    return false;
  }
  std::map<std::string, int> job_of;
  for (const auto& m : status["machines"]) {
    const std::string job = m.value("job", "");
    const std::string prefix = "plane-bench-";
    job_of[m.value("id", "")] = job.rfind(prefix, 0) == 0 ? std::stoi(job.substr(prefix.size())) : -1;
  }
  std::lock_guard<std::mutex> l(mu_);
  int pool = 0;
  for (Sim& s : sims_) {
    auto it = job_of.find(s.id);
    s.job = it == job_of.end() ? -1 : it->second;
    pool += s.job < 0;
  }
  std::printf("%d jobs of %d machines; %d machines in the pool\n", o_.jobs, PerJob(), pool);
  return true;
}

// Each named job's lines in the controller's log begin "job NAME: ".
static std::string JobPrefix(int job) { return "] info: job plane-bench-" + std::to_string(job) + ": "; }

std::vector<double> Bench::CrashInJobs(int count) {
  // After the silent machine's replacement has started everywhere, as for
  // the single crash (CrashARank).
  WaitForOneGeneration(60);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const std::string log = o_.dir + "/controller.log";
  log_from_ = ReadAll(log).size();
  // One placed machine in each of `count` jobs spread over the fleet.
  std::vector<int> victims, jobs;
  int64_t crashed_ms;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (int k = 0; k < count; ++k) {
      const int job = k * o_.jobs / count;
      for (int i = 0; i < static_cast<int>(sims_.size()); ++i) {
        const Sim& s = sims_[i];
        if (s.job == job && s.rank >= 0 && !s.silent && !s.crashed) {
          victims.push_back(i);
          jobs.push_back(job);
          break;
        }
      }
    }
    // The same moment for all: each agent reports its rank's exit at once.
    crashed_ms = WallMs();
    for (int i : victims) CrashLocked(i, crashed_ms);
  }
  // Each job's decision is its own: logged by its plane, naming its machine.
  std::vector<double> decide;
  size_t last = log_from_;
  for (size_t k = 0; k < victims.size(); ++k) {
    const std::string prefix = JobPrefix(jobs[k]), on = " on " + sims_[victims[k]].id;
    const LogLine d = WaitForLine(
        log, log_from_,
        [&](const std::string& l) { return IsDecision(l) && l.find(prefix) != std::string::npos && l.find(on) != std::string::npos; },
        60);
    decide.push_back(d.ms < 0 ? -1 : (d.ms - crashed_ms) / 1000.0);
    last = std::max(last, d.end);
    std::printf("crash in job %d on %s: decided %.2f s after the crash (%s)\n", jobs[k], sims_[victims[k]].id.c_str(),
                decide.back(), d.text.substr(0, std::min<size_t>(d.text.size(), 140)).c_str());
  }
  // Until the last of them: no job but the crashed ones decided anything.
  const std::string window = ReadAll(log).substr(log_from_, last - log_from_);
  std::map<int, int> others;
  for (int j = 0; j < o_.jobs; ++j) {
    if (std::find(jobs.begin(), jobs.end(), j) != jobs.end()) continue;
    const int n = CountIn(window, JobPrefix(j), ": action ");
    if (n > 0) others[j] = n;
  }
  std::printf("crashes in %zu jobs at once: %zu decided; decisions in the other %d jobs meanwhile: %zu jobs\n",
              victims.size(), std::count_if(decide.begin(), decide.end(), [](double d) { return d >= 0; }),
              o_.jobs - static_cast<int>(victims.size()), others.size());
  for (const auto& [j, n] : others) std::printf("  job %d: %d action(s)\n", j, n);
  std::fflush(stdout);
  log_from_ = std::max(log_from_, last);
  other_job_decisions_ = static_cast<int>(others.size());
  return decide;
}

}  // namespace plane_bench
