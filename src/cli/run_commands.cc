#include "cli/run_commands.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "demo/demo.h"

namespace bulwark::cli {
namespace {

// The flags shared by the demo and the benchmarks, then integer flags that
// keep their defaults when absent.
template <typename Options>
Status ReadRunFlags(const Args& a, Options& o, std::initializer_list<std::pair<const char*, int*>> ints) {
  o.exe_dir = ExeDir();
  o.out = a.Get("out", o.out);
  o.data = a.Get("data", o.data);
  o.config = a.Get("config", o.config);
  for (auto [key, field] : ints) {
    Result<int> v = IntFlag(a, key, *field);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  return Status::OK();
}

}  // namespace

Status DemoCmd(const Args& a) {
  demo::DemoOptions o;
  o.json = a.Has("json");
  BULWARK_RETURN_IF_ERROR(ReadRunFlags(a, o, {{"steps", &o.steps}, {"batch-size", &o.batch}, {"ckpt-every", &o.ckpt_every},
                                              {"threads", &o.threads}, {"machines", &o.machines},
                                              {"standby", &o.standby}, {"gap", &o.gap_steps}}));
  if (o.machines < 4 || o.standby != 2) {
    // Two evictions use up the standbys and the third leaves the job waiting.
    return Status::InvalidArgument("demo: the schedule is written for --machines 4 or more and --standby 2");
  }
  return demo::RunDemo(o);
}

Status BenchRecoveryCmd(const Args& a) {
  demo::BenchOptions o;
  BULWARK_RETURN_IF_ERROR(ReadRunFlags(a, o, {{"repeat", &o.repeat}, {"threads", &o.threads}}));
  return demo::RunRecoveryBench(o);
}

Status BenchCompareCmd(const Args& a) {
  demo::CompareBenchOptions o;
  BULWARK_RETURN_IF_ERROR(ReadRunFlags(a, o, {{"repeat", &o.repeat}, {"threads", &o.threads},
                                              {"provisioning-delay", &o.provisioning_delay_s},
                                              {"persist-every", &o.persist_every}}));
  return demo::RunCompareBench(o);
}

Status BenchLadderCmd(const Args& a) {
  demo::BenchOptions o;
  o.out = "runs/bench-ladder";
  o.repeat = 1;
  BULWARK_RETURN_IF_ERROR(ReadRunFlags(a, o, {{"repeat", &o.repeat}, {"threads", &o.threads}}));
  return demo::RunLadderBench(o);
}

Status BenchImplicitCmd(const Args& a) {
  demo::BenchOptions o;
  o.out = "runs/bench-implicit";
  BULWARK_RETURN_IF_ERROR(ReadRunFlags(a, o, {{"repeat", &o.repeat}, {"threads", &o.threads}}));
  return demo::RunImplicitBench(o);
}

Status BenchCheckpointCmd(const Args& a) {
  demo::CheckpointBenchOptions o;
  o.shard_optimizer = a.Has("shard-optimizer");
  BULWARK_RETURN_IF_ERROR(ReadRunFlags(a, o, {{"rounds", &o.rounds}, {"steps", &o.steps}, {"warmup", &o.warmup},
                                              {"threads", &o.threads}, {"persist-every", &o.persist_every}}));
  if (o.steps <= o.warmup) return Status::InvalidArgument("bench-checkpoint: --steps must exceed --warmup");
  return demo::RunCheckpointBench(o);
}

// The generator stays a process of its own (it spawns `bulwark controller`
// as another), so the controller's CPU, read from its /proc/PID/stat, never
// includes the generator's.
Status BenchPlaneCmd(const Args& a) {
  const std::string bench = ExeDir() + "/bulwark-plane-bench";
  std::vector<std::string> args = {bench, "--bulwark", ExeDir() + "/bulwark", "--dir",
                                   a.Get("out", "/tmp/bulwark-plane-bench")};
  for (const char* k : {"agents", "jobs", "seconds", "channels"}) {
    if (!a.Has(k)) continue;
    Result<int> v = IntFlag(a, k, 0);
    if (!v.ok()) return v.status();
    args.insert(args.end(), {std::string("--") + k, std::to_string(*v)});
  }
  if (a.Has("json")) args.push_back("--json");
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  ::execv(bench.c_str(), argv.data());
  return Status::NotFound("bench-plane: cannot run " + bench + ": " + std::strerror(errno) +
                          "; build it with 'cmake --build build --target bulwark-plane-bench'");
}

}  // namespace bulwark::cli
