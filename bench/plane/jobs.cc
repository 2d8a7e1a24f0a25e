// The plane bench's jobs: the one job of every machine but a standby, or J
// named jobs that share the fleet's pool (plane/fleet.h), submitted over the
// API the CLI uses.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

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

}  // namespace plane_bench
