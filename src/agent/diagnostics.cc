#include "agent/diagnostics.h"

#include <algorithm>
#include <cinttypes>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "agent/tracer.h"

namespace bulwark::agent {
namespace {

using Clock = std::chrono::steady_clock;

// This thread's CPU time in ms. The compute check is judged by it: on the
// local backend four emulated machines share two cores, and their wall
// times measured the scheduler (a machine whose check ran while another's
// alignment run held a core looked 2x slow).
double ThreadCpuMs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

uint64_t Fnv(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// bulwark-train sets this itself by re-executing (main.cc), which loads
// its ~290 libraries twice: 0.7 s more per check on this host.
constexpr const char* kPassiveWaits = "OMP_WAIT_POLICY=PASSIVE";

std::string Hex(uint64_t h) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

constexpr int kN = 96;       // matrix side
constexpr int kRounds = 80;  // chained products: ~71M multiply-adds, ~0.1 s

// Why a diagnostic's child failed, for the incident: "exited with code N"
// and, when bulwark-train said why, its error line.
std::string ExitDetail(const std::string& what, int code, const std::string& out) {
  std::string d = what + " exited with code " + std::to_string(code);
  const std::string key = "bulwark-train: error: ";
  const size_t at = out.rfind(key);
  if (at == std::string::npos) return d;
  const size_t end = out.find('\n', at);
  return d + " (" + out.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size()) + ")";
}

}  // namespace

// Computed once by this code (exact arithmetic: any correct machine agrees).
const char* ComputeCheckAnswer() { return "38dc94a49629a4e4"; }

TestOutcome ComputeCheck(bool corrupt) {
  const double cpu0 = ThreadCpuMs();
  std::vector<double> a(kN * kN), b(kN * kN), c(kN * kN);
  // Entries in [-4, 4]: products and sums of 96 of them stay far below 2^53.
  uint32_t x = 2463534242u;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return static_cast<double>(static_cast<int>(x % 9u) - 4);
  };
  for (double& v : a) v = next();
  for (double& v : b) v = next();
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kN; ++i) {
      for (int j = 0; j < kN; ++j) c[i * kN + j] = 0;
      for (int k = 0; k < kN; ++k) {
        const double aik = a[i * kN + k];
        for (int j = 0; j < kN; ++j) c[i * kN + j] += aik * b[k * kN + j];
      }
    }
    if (corrupt && round == kRounds - 1) c[kN + 1] += 1;  // the bad ALU's one wrong element
    // The next round's input: the result folded back into [-4, 4].
    for (int i = 0; i < kN * kN; ++i) a[i] = std::fmod(std::fabs(c[i]), 9.0) - 4.0;
  }
  TestOutcome o{"compute", false, "", ThreadCpuMs() - cpu0};
  const std::string got = Hex(Fnv(c.data(), c.size() * sizeof(double)));
  o.passed = got == ComputeCheckAnswer();
  o.detail = o.passed ? "" : "GEMM result hash " + got + " != known answer " + ComputeCheckAnswer();
  return o;
}

TestOutcome DeviceCheck(const InspectorPaths& paths) {
  const auto t0 = Clock::now();
  const HealthReading h = Inspect(paths);
  TestOutcome o{"device", h.device_ok, h.device_ok ? "" : h.device_detail, 0};
  o.ms = MsSince(t0);
  return o;
}

namespace {

bool IsBulwarkTrain(const std::string& prog) {
  const size_t slash = prog.rfind('/');
  return prog.substr(slash == std::string::npos ? 0 : slash + 1) == "bulwark-train";
}

// The job's --device (auto when it names none).
std::string JobDevice(const std::vector<std::string>& argv) {
  std::string device = "auto";
  for (size_t i = 1; i < argv.size(); ++i) {
    if (argv[i] == "--device" && i + 1 < argv.size()) device = argv[i + 1];
    if (argv[i].rfind("--device=", 0) == 0) device = argv[i].substr(9);
  }
  return device;
}

// The value of a string field of the run's JSON line ("" when absent).
std::string JsonString(const std::string& out, const std::string& key) {
  const std::string k = "\"" + key + "\":\"";
  const size_t at = out.find(k);
  if (at == std::string::npos) return "";
  const size_t end = out.find('"', at + k.size());
  return end == std::string::npos ? "" : out.substr(at + k.size(), end - at - k.size());
}

}  // namespace

std::vector<std::string> AlignmentArgv(const std::vector<std::string>& job_argv, const std::string& trainer,
                                       bool beside) {
  if (!job_argv.empty() && IsBulwarkTrain(job_argv[0])) {
    if (!beside) return job_argv;
    return {job_argv[0], "--config", "tiny", "--device", JobDevice(job_argv)};
  }
  if (job_argv.empty() || trainer.empty()) return {};
  return {trainer, "--config", "tiny"};
}

std::string AlignmentTrainer(const std::string& beside_agent) {
  const char* named = std::getenv("BULWARK_ALIGN_TRAINER");
  return named != nullptr && *named != '\0' ? std::string(named) : beside_agent;
}

TestOutcome AlignmentCheck(const std::vector<std::string>& trainer_argv, const std::string& sdc_file,
                           std::chrono::milliseconds budget, std::string* hash) {
  const auto t0 = Clock::now();
  TestOutcome o{"alignment", false, "", 0};
  if (trainer_argv.empty()) {
    o.detail = "no trainer command known (no ranks were started here yet)";
    return o;
  }
  // env(1) names the machine's emulated hardware for the child only.
  std::vector<std::string> argv = {"env", "-u", "BULWARK_RANK_SOCKET", "-u", "BULWARK_SDC", kPassiveWaits};
  if (!sdc_file.empty()) argv.push_back("BULWARK_SDC_FILE=" + sdc_file);
  argv.insert(argv.end(), trainer_argv.begin(), trainer_argv.end());
  argv.push_back("--align");
  int code = 0;
  Result<std::string> out = RunCaptured(argv, budget, &code, /*keep_stderr=*/true);
  o.ms = MsSince(t0);
  if (!out.ok()) {
    o.detail = out.status().message();
    return o;
  }
  const size_t at = out->find("\"align_hash\":\"");
  if (code != 0 || at == std::string::npos || at + 14 + 16 > out->size()) {
    o.detail = ExitDetail("the alignment run", code, *out) + " without a hash";
    return o;
  }
  *hash = out->substr(at + 14, 16);
  // The hash is judged against the other machines'; a GPU machine's own
  // GPUs must also agree with each other (trainer/diag/align.h), which
  // fails the machine whatever the others computed.
  const std::string disagree = JsonString(*out, "gpus_disagree");
  o.passed = disagree.empty();
  o.detail = "hash " + *hash;
  if (JsonString(*out, "device") == "cuda") {
    const size_t g = out->find("\"gpus\":");
    o.detail += " on " + (g == std::string::npos ? std::string("the") : std::to_string(std::atoi(out->c_str() + g + 7))) +
                " GPU(s)";
  }
  if (!disagree.empty()) o.detail = "the machine's GPUs disagree: " + disagree + " (" + o.detail + ")";
  return o;
}

TestOutcome ReplayCheck(const std::vector<std::string>& trainer_argv, const std::string& sdc_file,
                        const ReplayGroup& g, int steps, std::chrono::milliseconds budget) {
  const auto t0 = Clock::now();
  TestOutcome o{"replay/" + g.group, false, "", 0};
  if (trainer_argv.empty()) {
    o.detail = "no trainer command known (no ranks were started here yet)";
    return o;
  }
  std::vector<std::string> argv = {"env", "-u", "BULWARK_RANK_SOCKET", "-u", "BULWARK_SDC", kPassiveWaits,
                                   "RANK=" + std::to_string(g.rank), "WORLD_SIZE=" + std::to_string(g.world),
                                   "LOCAL_RANK=0", "MASTER_ADDR=" + g.master_addr,
                                   "MASTER_PORT=" + std::to_string(g.master_port)};
  if (!sdc_file.empty()) argv.push_back("BULWARK_SDC_FILE=" + sdc_file);
  argv.insert(argv.end(), trainer_argv.begin(), trainer_argv.end());
  argv.insert(argv.end(), {"--align", "--align-steps", std::to_string(steps)});
  // A pipeline job: the vertical group keeps the job's --pp; a horizontal
  // group replays one stage's share of the layers (trainer/diag/align.h).
  if (g.pp > 1 && g.stage >= 0) argv.insert(argv.end(), {"--align-stage", std::to_string(g.stage)});
  const std::string layout = g.pp <= 1    ? ""
                             : g.stage >= 0 ? "stage " + std::to_string(g.stage) + "'s layers, data parallel; "
                                            : "the job's pipeline (pp " + std::to_string(g.pp) + "); ";
  int code = 0;
  Result<std::string> out = RunCaptured(argv, budget, &code, /*keep_stderr=*/true);
  o.ms = MsSince(t0);
  if (!out.ok() || code != 0) {
    o.detail = layout + (out.ok() ? ExitDetail("the replay", code, *out) : out.status().message());
    return o;
  }
  if (g.rank != 0) {
    o.passed = true;
    o.detail = layout + "took part";
    return o;
  }
  const size_t at = out->find("\"align_hash\":\"");
  if (at == std::string::npos || at + 14 + 16 > out->size()) {
    o.detail = "the replay printed no hash";
    return o;
  }
  o.passed = out->find("\"finite\":true") != std::string::npos;
  o.detail = layout + (o.passed ? "" : "diverged (non-finite); ") + std::string("hash ") + out->substr(at + 14, 16);
  return o;
}

bool IsNetworkLink(const std::string& group) { return group.rfind("net", 0) == 0; }

TestOutcome NetworkCheck(const std::string& binary, const ReplayGroup& link, const InspectorPaths& health,
                         std::chrono::milliseconds budget) {
  const auto t0 = Clock::now();
  TestOutcome o{(link.rank == 0 ? "network/" : "network-part/") + link.group, false, "", 0};
  if (!Inspect(health).nic_up) {
    o.detail = "the NIC is down";
    return o;
  }
  if (binary.empty()) {
    o.detail = "no network check program (bulwark-train beside the agent)";
    return o;
  }
  // Each link gets at most 30 s: a peer that never comes must not use up
  // the budget of the links after it.
  const auto limit = std::min(budget, std::chrono::milliseconds(30000));
  std::vector<std::string> argv = {"env", "-u", "BULWARK_RANK_SOCKET", kPassiveWaits, "RANK=" + std::to_string(link.rank),
                                   "WORLD_SIZE=" + std::to_string(link.world), "LOCAL_RANK=0",
                                   "MASTER_ADDR=" + link.master_addr, "MASTER_PORT=" + std::to_string(link.master_port)};
  // A degraded emulated link slows the check's own transfers (the shared
  // stack has no link of its own to shape; under namespaces the real one is).
  if (const double slow = cluster::LinkSlowdown(health.Hardware()); slow > 1) {
    argv.push_back("BULWARK_NET_SLOW=" + std::to_string(slow));
  }
  // The check's own timeout ends before the kill, so that a link that
  // fails says why (its error line) instead of only "killed".
  char timeout_s[32];
  // (less 1.5 s for its start: loading libtorch takes ~0.9 s here).
  std::snprintf(timeout_s, sizeof timeout_s, "%.1f",
                std::max(0.5, 0.8 * static_cast<double>(limit.count()) / 1000 - 1.5));
  argv.insert(argv.end(), {binary, "--net-check", "--net-timeout", timeout_s});
  int code = 0;
  Result<std::string> out = RunCaptured(argv, limit, &code, /*keep_stderr=*/true);
  const double wall = MsSince(t0);
  if (!out.ok() || code != 0) {
    o.ms = wall;
    o.detail = out.ok() ? ExitDetail("the link check", code, *out) : out.status().message();
    return o;
  }
  // {"net_check":"ok","ms":...,"mb_per_s":...,"latency_us":...}
  auto number = [&](const char* key) {
    const std::string k = std::string("\"") + key + "\":";
    const size_t at = out->find(k);
    return at == std::string::npos ? -1.0 : std::atof(out->c_str() + at + k.size());
  };
  const double ms = number("ms"), mbps = number("mb_per_s"), lat = number("latency_us");
  if (ms <= 0) {
    o.ms = wall;
    o.detail = "the link check printed no timing";
    return o;
  }
  o.passed = true;
  o.ms = ms;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.0f MB/s, latency %.0f us", mbps, lat);
  o.detail = buf;
  return o;
}

DiagnosticsOutcome RunDiagnostics(const DiagnosticsRequest& req) {
  DiagnosticsOutcome out;
  const auto end = Clock::now() + req.budget;
  for (const std::string& test : req.tests) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) {
      out.results.push_back({test, false, "no time left of the " + std::to_string(req.budget.count()) + " ms budget", 0});
      continue;
    }
    if (test == "compute") {
      out.results.push_back(ComputeCheck(cluster::AluBroken(req.health.Hardware())));
    } else if (test == "device") {
      out.results.push_back(DeviceCheck(req.health));
    } else if (test == "replay") {
      // Rank 0 of each group speaks for it; the other ranks' runs only
      // report a failure to take part (it explains a group's silence).
      for (const ReplayGroup& g : req.replay) {
        if (IsNetworkLink(g.group)) continue;
        const auto left_now = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
        TestOutcome r = ReplayCheck(req.trainer_argv, req.health.sdc, g, req.replay_steps,
                                    std::max(left_now, std::chrono::milliseconds(1)));
        if (g.rank == 0) out.results.push_back(std::move(r));
        else if (!r.passed) out.results.push_back({"replay-part/" + g.group, false, r.detail, r.ms});
      }
    } else if (test == "network") {
      // In the controller's order: rounds of links that share no machine run at once (NetworkLinkRound in ladder.h).
      for (const ReplayGroup& g : req.replay) {
        if (!IsNetworkLink(g.group)) continue;
        const auto left_now = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
        TestOutcome r = NetworkCheck(req.net_check_binary, g, req.health,
                                     std::max(left_now, std::chrono::milliseconds(1)));
        if (g.rank == 0 || !r.passed) out.results.push_back(std::move(r));
      }
    } else if (test == "alignment") {
      out.results.push_back(AlignmentCheck(req.trainer_argv, req.health.sdc, left, &out.alignment_hash));
    } else {
      out.results.push_back({test, false, "unknown test", 0});
    }
  }
  return out;
}

}  // namespace bulwark::agent
