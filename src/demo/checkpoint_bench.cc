// bulwark bench-checkpoint: what every-step in-memory checkpoints cost and
// what they buy, on the local cluster.
//
// Cost: the same job (2 ranks, one per machine) with checkpoints off and on,
// interleaved `rounds` times in one run: tokens/s, median step time and the
// median time a step blocks on the checkpoint (waiting for the background
// copy before the update, or for the agent to release a slot).
// Benefit: restore time and lost steps from each source, side by side: a
// killed rank (its machine's memory), a dead machine (the backup peer, onto a
// standby), a machine and its backup peer dead together (durable storage).
// Figures only, never a judgement.
#include <algorithm>
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "common/files.h"
#include "demo/demo.h"
#include "demo/session.h"

namespace bulwark::demo {
namespace {

std::string Fmt(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::vector<std::string> TrainArgs(const CheckpointBenchOptions& o, int64_t steps, const std::string& memory) {
  std::vector<std::string> args = {"--config", o.config, "--data", o.data, "--steps", std::to_string(steps),
                                   "--log-format", "json", "--threads", std::to_string(o.threads),
                                   "--dist-timeout", "10", "--eval-every", "0", "--memory-ckpt", memory};
  if (o.shard_optimizer) args.push_back("--shard-optimizer");
  return args;
}

struct Throughput {
  std::vector<double> step_ms, block_ms, copy_ms, tokens_per_s;
  std::vector<double> agent_cpu_ms;  // per step, both agents together, one value per run
};

// CPU milliseconds a process has used (utime + stime), or -1.
double ProcessCpuMs(const std::string& pid_file) {
  Result<std::string> pid = ReadFile(pid_file);
  if (!pid.ok()) return -1;
  Result<std::string> stat = ReadFile("/proc/" + std::to_string(std::atoi(pid->c_str())) + "/stat");
  if (!stat.ok()) return -1;
  // Fields after the parenthesized command name; utime and stime are 14 and 15.
  std::istringstream in(stat->substr(stat->rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::atof(field.c_str());
    if (i == 15) stime = std::atof(field.c_str());
  }
  return (utime + stime) * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// One job to completion on a fresh two-machine cluster; the steps after the
// first `warmup` from rank 0's log.
Status MeasureOnce(const CheckpointBenchOptions& o, const std::string& memory, int round, Throughput* out) {
  const std::string dir = o.out + "/throughput-" + memory + "-" + std::to_string(round);
  Result<std::unique_ptr<Session>> sp = Session::Up(o.exe_dir, dir, 2, 0);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  BULWARK_RETURN_IF_ERROR(s.Submit("bench", 2, TrainArgs(o, o.steps, memory), {{"OMP_NUM_THREADS", std::to_string(o.threads)}},
                                   o.persist_every));
  Result<json> st = s.WaitFor("the job to complete", 60 + o.steps * 5.0,
                              [](const json& x) { return x["job"].value("state", "") == "completed"; });
  if (!st.ok()) return st.status();
  const std::string log = s.layout().rank_log(Session::SlotMachine(*st, 0), 0);
  Throughput run;
  for (const json& e : Events(log)) {
    if (e["event"] != "step" || e["step"].get<int64_t>() <= o.warmup) continue;
    run.step_ms.push_back(e["step_ms"].get<double>());
    run.tokens_per_s.push_back(e["tokens_per_s"].get<double>());
    if (e.contains("ckpt_block_ms")) run.block_ms.push_back(e["ckpt_block_ms"].get<double>());
    if (e.contains("ckpt_copy_cpu_ms")) run.copy_ms.push_back(e["ckpt_copy_cpu_ms"].get<double>());
  }
  // The agents' CPU over the whole run: pushing and receiving backups and
  // persisting is theirs (heartbeats and log following are in both modes).
  double agents = 0;
  for (const char* m : {"m01", "m02"}) agents += ProcessCpuMs(s.layout().agent_pid(m));
  std::printf("  round %d, checkpoints %-3s: %zu steps, median %.1f ms/step, agents %.1f CPU ms/step%s\n", round,
              memory.c_str(), run.step_ms.size(), Median(run.step_ms), agents / o.steps,
              run.block_ms.empty() ? "" : (", median blocking " + Fmt(Median(run.block_ms), 3) + " ms, copy " +
                                           Fmt(Median(run.copy_ms), 1) + " CPU ms").c_str());
  for (auto [from, to] : {std::pair{&run.step_ms, &out->step_ms}, {&run.tokens_per_s, &out->tokens_per_s},
                          {&run.block_ms, &out->block_ms}, {&run.copy_ms, &out->copy_ms}})
    to->insert(to->end(), from->begin(), from->end());
  out->agent_cpu_ms.push_back(agents / o.steps);
  std::fflush(stdout);
  return s.Down();
}

}  // namespace

Status RunCheckpointBench(const CheckpointBenchOptions& o) {
  BULWARK_RETURN_IF_ERROR(PrepareRunDir(o.exe_dir, o.data, o.out));
  std::printf("bench/checkpoint_overhead: %s config, 2 ranks (1 per machine, %d thread each), %d rounds of %d steps "
              "(first %d not counted), persisting every %d steps, %s\n",
              o.config.c_str(), o.threads, o.rounds, o.steps, o.warmup, o.persist_every,
              o.shard_optimizer ? "ZeRO-1 (backups pushed to the peer)" : "replicated state (backups written by the peer)");
  std::map<std::string, Throughput> runs;
  for (int round = 1; round <= o.rounds; ++round) {
    for (const char* memory : {"off", "on"}) {
      // Alternate which goes first, so drift in the machine's load is shared.
      const std::string m = (round % 2 == 1) ? memory : (std::string(memory) == "off" ? "on" : "off");
      BULWARK_RETURN_IF_ERROR(MeasureOnce(o, m, round, &runs[m]));
    }
  }

  // --- restores from each source -------------------------------------------
  const std::string dir = o.out + "/restore";
  Result<std::unique_ptr<Session>> sp = Session::Up(o.exe_dir, dir, 2, 3);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  BULWARK_RETURN_IF_ERROR(s.Submit("bench", 2, TrainArgs(o, 10000000, "on"), {{"OMP_NUM_THREADS", std::to_string(o.threads)}},
                                   o.persist_every));
  auto step = [](const json& st) { return st["job"].value("last_step", int64_t{0}); };
  json samples = json::array();
  struct Case {
    const char* name;
    std::vector<size_t> slots;  // machines (by placement slot) taken down together
    const char* fault;
  };
  for (const Case& c : {Case{"kill", {0}, "kill"}, Case{"machine-down", {1}, "machine-down"},
                        Case{"2 machines down", {0, 1}, "machine-down"}}) {
    // Past a persisted step since the last restart, so durable storage has
    // a copy newer than the run's start.
    Result<json> st = s.StatusJson();
    if (!st.ok()) return st.status();
    const int64_t target = step(*st) + o.persist_every + 5;
    st = s.WaitFor("training to step " + std::to_string(target), 300, [&](const json& x) { return step(x) >= target; });
    if (!st.ok()) return st.status();
    const int64_t before = (*st)["job"].value("incidents", int64_t{0});
    int64_t inject_ms = 0;
    for (size_t slot : c.slots) {
      Result<int> sent = s.Inject(c.fault, Session::SlotMachine(*st, slot), &inject_ms);
      if (!sent.ok()) return sent.status();
    }
    Result<json> inc = s.AwaitNewIncident(before, 30);
    if (!inc.ok()) return inc.status();
    Result<json> closed = s.AwaitClosed((*inc)["id"].get<int64_t>(), 180);
    if (!closed.ok()) return closed.status();
    st = s.StatusJson();
    if (!st.ok()) return st.status();
    std::optional<json> restore = LastEvent(s.layout().rank_log(Session::SlotMachine(*st, 0), 0), "restore");
    json x{{"case", c.name},
           {"source", restore ? restore->value("source", "?") : "none"},
           {"restore_ms", restore ? restore->value("ms", -1.0) : -1.0},
           {"recover_s", closed->value("recover_s", -1.0)},
           {"lost_steps", closed->value("lost_steps", int64_t{-1})},
           {"restored_step", closed->value("restored_step", int64_t{-1})}};
    std::printf("  %-16s restored step %lld from %s in %.0f ms; recover %.2f s, lost %lld steps\n", c.name,
                static_cast<long long>(x["restored_step"].get<int64_t>()), x["source"].get<std::string>().c_str(),
                x["restore_ms"].get<double>(), x["recover_s"].get<double>(),
                static_cast<long long>(x["lost_steps"].get<int64_t>()));
    std::fflush(stdout);
    samples.push_back(x);
  }
  BULWARK_RETURN_IF_ERROR(s.Down());

  // --- the report ------------------------------------------------------------
  const Throughput& off = runs["off"];
  const Throughput& on = runs["on"];
  // Throughput from the median step time: one slow step (a page-cache miss,
  // another tenant) must not move the comparison.
  const double tokens_per_step = off.step_ms.empty() ? 0 : off.tokens_per_s[0] * off.step_ms[0] / 1000.0;
  const double tok_off = Median(off.step_ms) > 0 ? 1000.0 / Median(off.step_ms) : 0;
  const double tok_on = Median(on.step_ms) > 0 ? 1000.0 / Median(on.step_ms) : 0;
  const double loss = tok_off > 0 ? 100.0 * (1.0 - tok_on / tok_off) : 0;
  const double block = Median(on.block_ms);
  std::printf("\n  %-22s %12s %14s %18s\n", "checkpoints", "tokens/s", "median ms/step", "median blocking ms");
  std::printf("  %-22s %12.0f %14.1f %18s\n", "none", tok_off * tokens_per_step, Median(off.step_ms), "-");
  std::printf("  %-22s %12.0f %14.1f %18.3f\n", "every step, in memory", tok_on * tokens_per_step, Median(on.step_ms), block);
  std::printf("  throughput loss %.2f%% (target <= 1%%); blocking %.3f%% of the step (target <= 0.5%%)\n", loss,
              100.0 * block / Median(on.step_ms));
  // Where the loss goes on a host whose cores all train: the CPU the
  // checkpoint path takes per step, against the CPU a step has.
  const double agent_extra = Median(on.agent_cpu_ms) - Median(off.agent_cpu_ms);
  const double copy = Median(on.copy_ms);
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::printf("  checkpoint CPU per step: %.1f ms copying in each of 2 ranks + %.1f ms in the agents (sending, "
              "receiving, persisting) = %.1f%% of the %ld cores' %.0f ms\n",
              copy, agent_extra, 100.0 * (2 * copy + agent_extra) / (cores * Median(on.step_ms)), cores,
              cores * Median(on.step_ms));
  std::printf("\n  %-16s %-8s %11s %10s %6s\n", "restore after", "source", "restore ms", "recover s", "lost");
  for (const json& x : samples) {
    std::printf("  %-16s %-8s %11.0f %10.2f %6lld\n", x["case"].get<std::string>().c_str(),
                x["source"].get<std::string>().c_str(), x["restore_ms"].get<double>(), x["recover_s"].get<double>(),
                static_cast<long long>(x["lost_steps"].get<int64_t>()));
  }
  std::printf("  (restore: the slowest rank, from asking its agent to holding the state; recover: restart decision -> first step)\n");
  const json record{{"config", o.config}, {"shard_optimizer", o.shard_optimizer}, {"rounds", o.rounds}, {"steps", o.steps}, {"warmup", o.warmup},
                    {"off_step_ms", off.step_ms}, {"on_step_ms", on.step_ms}, {"on_block_ms", on.block_ms},
                    {"on_copy_cpu_ms", on.copy_ms}, {"off_agent_cpu_ms_per_step", off.agent_cpu_ms},
                    {"on_agent_cpu_ms_per_step", on.agent_cpu_ms},
                    {"throughput_loss_pct", loss}, {"median_block_ms", block}, {"restores", samples}};
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(o.out + "/result.json", record.dump(2) + "\n"));
  std::printf("  raw samples: %s/result.json\n", o.out.c_str());
  return Status::OK();
}

}  // namespace bulwark::demo
