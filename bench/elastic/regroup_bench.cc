// bench/elastic/regroup: what re-forming the data-parallel communicator
// costs as the world grows, with bulwark-train's own Comm, over Gloo's full
// mesh or over the ring elastic jobs use (trainer/comm/ring.h). An elastic
// membership change re-forms it among processes that are already up
// (trainer/step/elastic.h), so that is what is timed: W processes start and
// form generation 1 (not timed: the cold start), one of them leaves, and
// the W - 1 survivors form generation 2 on a new port, from the moment all
// are told to until their first all-reduce returns. Per W the slowest
// rank's time is printed (the step waits for it), then the median time of
// an all-reduce of the tiny model's gradients (368,960 int64, the exact
// sum's buffer) in generation 2, and of one of 8 int64 (a collective's
// latency alone: 2(W - 1) hops on a flat ring, 2(G - 1) + 2(K - 1) in two
// levels of K groups of at most G, trainer/comm/ring.h's TwoLevel).
//
// Every process runs on this host's cores, so the figure is an upper bound
// for the CPU work of a mesh of W, not a network figure; what it shows is
// how the cost grows with W. Figures only.
//
// --plan: generation 2 forms with no store (ring.h's RingPlan): this
// process plays the controller and writes each survivor one plan (the
// nonce, the addresses of the ranks it links to and its view of the
// layout: generation 1's RingLayout without the rank that left, as the
// controller's placement keeps it), as a START_RANKS would carry it; it
// prints how long writing them took per survivor and how many addresses
// the largest held.
//
// Links made: the ring links a survivor formed anew for generation 2,
// connected or accepted (a kept link is not counted); dialled: of those,
// the ones it connected. Each is the most of any survivor. Point-to-point
// links (healing, ZeRO-1's backups) are dialled when first used, after
// this, and are not counted.
//
// --replace (with --plan): a standby's process takes the rank that left,
// as when the pool has one (the common case at scale): it is up and
// listening before the change, as a prespawned spare is, and generation 2
// has W ranks again. The survivors' links and time are printed as above,
// the joiner's links apart.
//
// Usage: bulwark-regroup-bench [--comm gloo|ring] [--group G] [--plan [--replace]] [W ...]
//   (default ring; --group as bulwark-train's --ring-group: 1 flat, 0 auto; W 3 4 8 16 32)
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "trainer/comm/dist.h"
#include "trainer/comm/ring.h"

extern char** environ;

namespace bulwark::trainer {
namespace {

double NowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr int64_t kGradients = 368960;

// A rank: forms generation 1, waits for the start file, then leaves (the
// middle rank) or forms generation 2 with the other survivors and prints
// its time to the first all-reduce, then the median of 20 more.
// The plan the controller wrote this survivor, in the text a START_RANKS
// carries (EncodeRingPlan): the nonce, the addresses of the ranks it
// links to, and its view of the layout.
Result<RingPlan> ReadPlan(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return Status::NotFound("no plan at " + path);
  std::string text;
  char buf[4096];
  for (size_t n = 0; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return DecodeRingPlan(text);
}

// The standby's process that takes rank `lost` in generation 2 (--replace):
// it listens, says where, and joins from its plan once told to go. Its
// line's rank is kJoiner + lost, so the survivors' figures leave it out.
constexpr int kJoiner = 1000;

int Joiner(int lost, int world, int port, int group, const std::string& go, const std::string& ready) {
  DistEnv env;
  env.rank = lost;
  env.world_size = world;
  env.master_port = port + 1;
  auto links = RingLinks::Listen(env.master_addr);
  if (!links.ok()) return 1;
  (*links)->SetGroupSize(group);
  if (std::FILE* f = std::fopen(ready.c_str(), "a")) {
    std::fprintf(f, "%d %s\n", kJoiner + lost, (*links)->identity().c_str());
    std::fclose(f);
  }
  while (::access(go.c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double t0 = NowMs();
  auto plan = ReadPlan(go + ".plan." + std::to_string(kJoiner + lost));
  if (!plan.ok()) return 1;
  plan->group = group;
  auto comm = Comm::Join(env, *plan, 120, **links);
  if (!comm.ok()) {
    std::fprintf(stderr, "joiner: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  const double connected = NowMs();
  std::vector<torch::Tensor> one{torch::ones({1})};
  if (!(*comm)->AllReduceSum(one).ok()) return 1;
  std::printf("%d %.3f %.3f 0 %d 0 %d\n", kJoiner + lost, connected - t0, NowMs() - t0, (*links)->made(),
              (*links)->dialled());
  // The survivors' timed all-reduces need every member to the end.
  std::vector<torch::Tensor> grads{torch::ones({kGradients}, torch::kInt64)};
  for (int i = 0; i < 21; ++i) if (!(*comm)->AllReduceSum(grads).ok()) return 1;
  std::vector<torch::Tensor> tiny{torch::ones({8}, torch::kInt64)};
  for (int i = 0; i < 41; ++i) if (!(*comm)->AllReduceSum(tiny).ok()) return 1;
  return 0;
}

int Rank(int rank, int world, int port, bool ring, int group, bool planned, bool replace, const std::string& go,
         const std::string& ready) {
  DistEnv env;
  env.rank = rank;
  env.world_size = world;
  env.master_port = port;
  std::unique_ptr<RingLinks> links;
  if (ring) {
    auto l = RingLinks::Listen(env.master_addr);
    if (!l.ok()) return 1;
    links = std::move(*l);
    links->SetGroupSize(group);
  }
  auto first = Comm::Connect(env, 120, links.get());
  if (!first.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, first.status().ToString().c_str());
    return 1;
  }
  std::vector<torch::Tensor> one{torch::ones({1})};
  if (!(*first)->AllReduceSum(one).ok()) return 1;
  if (std::FILE* f = std::fopen(ready.c_str(), "a")) {
    std::fprintf(f, "%d %s\n", rank, links ? links->identity().c_str() : "-");
    std::fclose(f);
  }
  while (::access(go.c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int lost = world / 2;
  if (rank == lost) return 0;  // its sockets close as it exits, as a killed rank's do
  first->reset();  // the survivors leave generation 1 (a ring keeps its links)
  const double t0 = NowMs();
  env.master_port = port + 1;
  env.world_size = replace ? world : world - 1;
  env.rank = replace || rank < lost ? rank : rank - 1;
  Result<std::unique_ptr<Comm>> second = Status::Internal("unset");
  if (planned) {
    auto plan = ReadPlan(go + ".plan." + std::to_string(rank));
    if (!plan.ok()) return 1;
    plan->group = group;  // the layout the plan was cut by
    second = Comm::Join(env, *plan, 120, *links);
  } else {
    second = Comm::Connect(env, 120, links.get());
  }
  if (!second.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, second.status().ToString().c_str());
    return 1;
  }
  const double connected = NowMs();
  if (!(*second)->AllReduceSum(one).ok()) return 1;
  const double regrouped = NowMs() - t0;
  std::vector<torch::Tensor> grads{torch::ones({kGradients}, torch::kInt64)};
  std::vector<double> took;
  for (int i = 0; i < 21; ++i) {
    const double a = NowMs();
    if (!(*second)->AllReduceSum(grads).ok()) return 1;
    took.push_back(NowMs() - a);
  }
  std::sort(took.begin(), took.end());
  std::vector<torch::Tensor> tiny{torch::ones({8}, torch::kInt64)};
  std::vector<double> hops;
  for (int i = 0; i < 41; ++i) {
    const double a = NowMs();
    if (!(*second)->AllReduceSum(tiny).ok()) return 1;
    hops.push_back(NowMs() - a);
  }
  std::sort(hops.begin(), hops.end());
  std::printf("%d %.3f %.3f %.3f %d %.3f %d\n", rank, connected - t0, regrouped, took[took.size() / 2],
              links ? links->made() : world - 2, hops[hops.size() / 2],
              links ? links->dialled() : (world - 2) / 2);  // Gloo: one to every other survivor, half dialled
  return 0;
}

// The controller's part of a membership change without a store: one plan
// per survivor, cut by the layout of generation 1 (which the store formed
// by RingLayout::Default) without the rank that left, as the controller's
// placement keeps it (ring_layout.h): or unchanged, when a standby's
// process takes the rank. Returns the largest plan's address count.
size_t WritePlans(const std::string& go, int world, int group, bool replace,
                  const std::map<int, std::string>& identity) {
  const int lost = world / 2;
  const RingLayout before = RingLayout::Default(world, group);
  const std::vector<RankRing> views = ViewsOf(replace ? before : before.Without(lost));
  // A member's rank in generation 2 -> its rank in generation 1 (the
  // joiner's line: kJoiner + lost).
  std::vector<int> old;
  for (int r = 0; r < world; ++r) {
    if (r != lost) old.push_back(r);
    else if (replace) old.push_back(kJoiner + lost);
  }
  const int members = static_cast<int>(old.size());
  size_t most = 0;
  for (int r = 0; r < members; ++r) {
    const RingPlan plan = PlanFor(r, views[r], members, 2 + (static_cast<uint64_t>(world) << 32),
                                  [&](int peer) { return identity.at(old[peer]); });
    const std::string text = EncodeRingPlan(plan);
    most = std::max(most, plan.identities.size());
    const std::string path = go + ".plan." + std::to_string(old[r]);
    if (std::FILE* f = std::fopen(path.c_str(), "w")) {
      std::fputs(text.c_str(), f);
      std::fclose(f);
    }
  }
  return most;
}

// Starts this program again with `args` (argv[0] first); its pid joins `kids`.
bool Spawn(std::vector<std::string> args, std::vector<pid_t>& kids) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) return false;
  kids.push_back(pid);
  return true;
}

int Run(const char* self, bool ring, int group, bool planned, bool replace, const std::vector<int>& widths) {
  std::printf("host: %u cores; W processes up, one leaves, %s form generation 2 (%s)\n",
              std::thread::hardware_concurrency(),
              replace ? "the W - 1 others and a standby's process in its place" : "the W - 1 others",
              !ring ? "TCPStore + Gloo full mesh"
              : planned ? (group == 1 ? "flat ring from plans, no store" : "ring in two levels from plans, no store")
              : group == 1 ? "flat ring, links kept" : "ring in two levels, links kept");
  std::printf("%6s %10s %16s %22s %18s %24s %20s\n", "W", "layout", "connect (max)", "connect+all-reduce",
              "links made/dialled", "all-reduce 369k int64", "all-reduce 8 int64");
  std::mt19937 rng(std::random_device{}());
  for (int w : widths) {
    // Below the ephemeral range (32768 and up), as the controller picks.
    const int port = 10000 + static_cast<int>(rng() % 20000);
    const std::string dir = "/tmp/bulwark-regroup-" + std::to_string(::getpid());
    const std::string go = dir + ".go", out = dir + ".out", ready = dir + ".ready";
    for (const std::string& f : {go, out, ready}) std::remove(f.c_str());
    std::vector<pid_t> kids;
    for (int r = 0; r < w; ++r) {
      std::vector<std::string> args = {self, "--rank", std::to_string(r), "--world", std::to_string(w), "--port",
                                       std::to_string(port), "--go", go, "--out", out, "--ready", ready,
                                       "--comm", ring ? "ring" : "gloo", "--group", std::to_string(group)};
      if (planned) args.push_back("--plan");
      if (replace) args.push_back("--replace");
      if (!Spawn(args, kids)) return 1;
    }
    if (replace && !Spawn({self, "--joiner", std::to_string(w / 2), "--world", std::to_string(w), "--port",
                           std::to_string(port), "--go", go, "--out", out, "--ready", ready, "--group",
                           std::to_string(group)},
                          kids)) {
      return 1;
    }
    // Generation 1 formed: every rank said so (their cold start is not
    // timed), and the joiner listens.
    std::map<int, std::string> identity;
    for (int said = 0; said < w + (replace ? 1 : 0);) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      said = 0;
      if (std::FILE* f = std::fopen(ready.c_str(), "r")) {
        char addr[128];
        for (int r = 0; std::fscanf(f, "%d %127s", &r, addr) == 2;) {
          identity[r] = addr;
          ++said;
        }
        std::fclose(f);
      }
      int st = 0;
      if (::waitpid(-1, &st, WNOHANG) > 0) {
        std::printf("%6d   failed: a rank exited while forming generation 1\n", w);
        break;
      }
    }
    double plan_ms = 0;
    size_t plan_most = 0;
    if (planned) {
      const double p0 = NowMs();
      plan_most = WritePlans(go, w, group, replace, identity);
      plan_ms = (NowMs() - p0) / (replace ? w : w - 1);
    }
    std::FILE* g = std::fopen(go.c_str(), "w");
    if (g != nullptr) std::fclose(g);
    bool ok = true;
    for (pid_t k : kids) {
      int st = 0;
      ::waitpid(k, &st, 0);
      ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    double connect = 0, total = 0, reduce = 0, tiny = 0;
    // Links made: connected or accepted anew by a survivor; dialled: of
    // those, the ones it connected (the most of any survivor, each).
    int lines = 0, made = 0, dialled = 0, joiner_made = -1, joiner_dialled = -1;
    if (std::FILE* f = std::fopen(out.c_str(), "r")) {
      int rank = 0, m = 0, d = 0;
      double c = 0, t = 0, a = 0, h = 0;
      while (std::fscanf(f, "%d %lf %lf %lf %d %lf %d", &rank, &c, &t, &a, &m, &h, &d) == 7) {
        if (rank >= kJoiner) {
          joiner_made = m;
          joiner_dialled = d;
          continue;
        }
        dialled = std::max(dialled, d);
        connect = std::max(connect, c);
        total = std::max(total, t);
        reduce = std::max(reduce, a);
        tiny = std::max(tiny, h);
        made = std::max(made, m);
        ++lines;
      }
      std::fclose(f);
    }
    for (const std::string& f : {go, out, ready}) std::remove(f.c_str());
    for (int r = 0; r < w; ++r) std::remove((go + ".plan." + std::to_string(r)).c_str());
    std::remove((go + ".plan." + std::to_string(kJoiner + w / 2)).c_str());
    if (!ok || lines != w - 1 || (replace && joiner_made < 0)) {
      std::printf("%6d   failed (%d of %d survivors reported)\n", w, lines, w - 1);
      continue;
    }
    // A store's generation is cut by RingLayout::Default; the plans keep
    // generation 1's groups (WritePlans): K groups of at most G.
    const RingLayout L = planned ? (replace ? RingLayout::Default(w, group) : RingLayout::Default(w, group).Without(w / 2))
                                 : RingLayout::Default(w - 1, group);
    const std::string layout = !ring ? "mesh" : L.flat() ? "flat" : std::to_string(L.groups()) + "x" + std::to_string(L.parts);
    const std::string links = std::to_string(made) + " / " + std::to_string(dialled);
    std::printf("%6d %10s %13.1f ms %19.1f ms %18s %21.1f ms %17.2f ms", w, layout.c_str(), connect, total,
                links.c_str(), reduce, tiny);
    if (planned) std::printf("   plan: %zu addresses, written in %.3f ms per survivor; store operations: 0", plan_most, plan_ms);
    if (replace) std::printf("; the joiner made %d links, dialled %d", joiner_made, joiner_dialled);
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace bulwark::trainer

int main(int argc, char** argv) {
  int rank = -1, world = 0, port = 0, group = 0, joiner = -1;
  bool ring = true, planned = false, replace = false;
  std::string go, out, ready;
  std::vector<int> widths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rank" && i + 1 < argc) rank = std::atoi(argv[++i]);
    else if (a == "--world" && i + 1 < argc) world = std::atoi(argv[++i]);
    else if (a == "--port" && i + 1 < argc) port = std::atoi(argv[++i]);
    else if (a == "--go" && i + 1 < argc) go = argv[++i];
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--ready" && i + 1 < argc) ready = argv[++i];
    else if (a == "--group" && i + 1 < argc) group = std::atoi(argv[++i]);
    else if (a == "--plan") planned = true;
    else if (a == "--replace") replace = true;
    else if (a == "--joiner" && i + 1 < argc) joiner = std::atoi(argv[++i]);
    else if (a == "--comm" && i + 1 < argc && (std::string(argv[i + 1]) == "ring" || std::string(argv[i + 1]) == "gloo"))
      ring = std::string(argv[++i]) == "ring";
    else if (std::atoi(a.c_str()) >= 3) widths.push_back(std::atoi(a.c_str()));
    else {
      std::fprintf(stderr, "bulwark-regroup-bench: '%s' is not --comm gloo|ring, --group G, --plan or a world size of 3 or more; e.g. 3 4 8\n", a.c_str());
      return 2;
    }
  }
  if (rank >= 0) {
    // Each rank appends its line; lines of a few bytes are written whole.
    if (std::freopen(out.c_str(), "a", stdout) == nullptr) return 1;
    return bulwark::trainer::Rank(rank, world, port, ring, group, planned, replace, go, ready);
  }
  if (joiner >= 0) {
    if (std::freopen(out.c_str(), "a", stdout) == nullptr) return 1;
    return bulwark::trainer::Joiner(joiner, world, port, group, go, ready);
  }
  if (widths.empty()) widths = {3, 4, 8, 16, 32};
  if (replace && !planned) {
    std::fprintf(stderr, "bulwark-regroup-bench: --replace needs --plan (the joiner forms from its plan)\n");
    return 2;
  }
  if (planned && !ring) {
    std::fprintf(stderr, "bulwark-regroup-bench: --plan forms the ring without a store; drop --comm gloo\n");
    return 2;
  }
  return bulwark::trainer::Run(argv[0], ring, group, planned, replace, widths);
}
