// An elastic world formed from the controller's plans alone: each rank is
// given its slot's fixed ring address (BULWARK_RING_ADDR) and its plan
// (BULWARK_RING_PLAN: the nonce, the layout, the addresses of the ranks it
// links to), as the agent passes them on from START_RANKS. No store is
// reachable, so a rank that tried one would fail.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/ring_layout.h"
#include "support/trainer_fixture.h"

namespace bulwark {
namespace {

using nlohmann::json;
using testing::ProcessResult;
using testing::Trainer;

// `n` loopback ports that bind now, above the kernel's ephemeral range
// (32768-60999), where no outgoing connection of another test takes them.
std::vector<int> FixedPorts(int n) {
  std::vector<int> out;
  for (int port = 61000 + static_cast<int>(::getpid() % 400) * 8; port < 65500 && static_cast<int>(out.size()) < n;
       ++port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) out.push_back(port);
    ::close(fd);
  }
  return out;
}

class ElasticPlan : public Trainer {
 protected:
  // `world` ranks started at once, each with only its plan; the store's
  // port is one no one listens on. With `pp` > 1, each rank also gets its
  // stage ring's plan and address, and its world plan names its pipeline
  // neighbours, as the controller cuts them (plane/actuator.cc).
  std::vector<ProcessResult> LaunchPlanned(int world, int group, const std::vector<std::string>& flags, int pp = 1) {
    const std::vector<int> ports = FixedPorts(2 * world);
    EXPECT_EQ(static_cast<int>(ports.size()), 2 * world);
    auto addr = [&](int r, int ring) { return "127.0.0.1:" + std::to_string(ports[ring * world + r]); };
    const int D = world / pp;
    std::vector<std::unique_ptr<testing::Process>> procs;
    for (int r = 0; r < world; ++r) {
      RingPlan plan = PlanFor(r, world, group, RingNonce("plan-test", 1), [&](int x) { return addr(x, 0); });
      std::string text = EncodeRingPlan(plan), where = addr(r, 0);
      if (pp > 1) {
        for (int x : {r - D, r + D}) {
          if (x >= 0 && x < world) plan.identities[x] = addr(x, 0);
        }
        const RingPlan stage = PlanFor(r % D, D, group, RingNonce("plan-test", 1),
                                       [&](int d) { return addr(r / D * D + d, 1); });
        text = EncodeRingPlan(plan) + "|" + EncodeRingPlan(stage);
        where += "|" + addr(r, 1);
      }
      procs.push_back(std::make_unique<testing::Process>(
          Args(flags), std::map<std::string, std::string>{{"RANK", std::to_string(r)},
                                                         {"LOCAL_RANK", std::to_string(r)},
                                                         {"WORLD_SIZE", std::to_string(world)},
                                                         {"MASTER_ADDR", "127.0.0.1"},
                                                         {"MASTER_PORT", "9"},
                                                         {"BULWARK_RING_ADDR", where},
                                                         {"BULWARK_RING_PLAN", text}}));
    }
    std::vector<ProcessResult> out;
    for (auto& p : procs) out.push_back(p->Wait());
    return out;
  }
};

// 6 replicas on 6 ranks, on the flat ring and in two levels (groups of 2,
// so cross rings too), end on the bits of one process computing all 6, and
// every rank says its generation came from a plan.
TEST_F(ElasticPlan, ARingFormedFromPlansAloneComputesTheSameBits) {
  const std::vector<std::string> flags = {"--steps", "3", "--batch-size", "1", "--elastic-replicas", "6",
                                          "--micro-batches", "1", "--precision", "fp32", "--memory-ckpt", "off"};
  const std::string want = Checksum(Launch(1, flags), 3);
  for (const int group : {1, 2}) {
    SCOPED_TRACE("group " + std::to_string(group));
    auto run = LaunchPlanned(6, group, flags);
    EXPECT_EQ(Checksum(run, 3), want);
    auto start = testing::Events(run[0], "start");
    ASSERT_FALSE(start.empty()) << run[0].out << run[0].err;
    EXPECT_EQ(start[0].value("rendezvous", ""), "plan") << start[0].dump();
  }
}

// Replicas that are pipelines: 3 replicas of 2 stages form the world ring
// and each stage's ring from plans alone and end on the bits of one
// pipeline computing all 3 replicas' micro-batches.
TEST_F(ElasticPlan, PipelineReplicasFormBothRingsFromPlansAlone) {
  const std::vector<std::string> flags = {"--steps", "3", "--batch-size", "4", "--elastic-replicas", "3", "--pp", "2",
                                          "--micro-batches", "2", "--precision", "fp32", "--memory-ckpt", "off"};
  const std::string want = Checksum(Launch(2, flags), 3);
  auto run = LaunchPlanned(6, 0, flags, /*pp=*/2);
  EXPECT_EQ(Checksum(run, 3), want);
  auto start = testing::Events(run[0], "start");
  ASSERT_FALSE(start.empty()) << run[0].out << run[0].err;
  EXPECT_EQ(start[0].value("rendezvous", ""), "plan") << start[0].dump();
}

// Plans cut for another layout (the job file said no pipeline, the trainer
// has --pp 2) are set aside with a line that says so, and the generation
// rendezvous through the store as before: slower, not a failure.
TEST_F(ElasticPlan, PlansForAnotherLayoutFallBackToTheStore) {
  const std::vector<std::string> flags = {"--steps", "2", "--batch-size", "4", "--elastic-replicas", "1", "--pp", "2",
                                          "--micro-batches", "2", "--precision", "fp32", "--memory-ckpt", "off"};
  auto procs = testing::StartRanks(Args(flags), 2,
                                   {{"BULWARK_RING_ADDR", "127.0.0.1:61999"}, {"BULWARK_RING_PLAN", "5;0;1=127.0.0.1:61998"}});
  ASSERT_EQ(procs.size(), 2u);
  std::vector<ProcessResult> run;
  for (auto& p : procs) run.push_back(p->Wait());
  Checksum(run, 2);
  auto start = testing::Events(run[0], "start");
  ASSERT_FALSE(start.empty()) << run[0].err;
  EXPECT_EQ(start[0].value("rendezvous", ""), "store");
  EXPECT_NE(run[0].err.find("give the job file parallel: {pp: 2}"), std::string::npos) << run[0].err;
}

// A plan the rank cannot read is a one-line error that names the variable
// and the form it wants, before any training.
TEST_F(ElasticPlan, AMalformedPlanIsAOneLineError) {
  auto r = testing::Run(Args({"--elastic-replicas", "2", "--steps", "1"}),
                        {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "9"},
                         {"BULWARK_RING_ADDR", "127.0.0.1:61999"}, {"BULWARK_RING_PLAN", "7;x;1=127.0.0.1:1"}});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("BULWARK_RING_PLAN"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("want nonce;group;rank=addr:port"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace bulwark
