// The plane's operator requests (plane_operators.cc): submitting a job,
// injecting faults, and the one-line refusals of bad ones.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "cluster/local/emulated_hardware.h"
#include "cluster/local/emulator.h"
#include "plane/plane.h"
#include "support/agent_messages.h"
#include "support/plane_commands.h"
#include "support/process.h"

namespace bulwark::plane {
namespace {

using testing::Launch;
using testing::Reg;

TEST(Plane, SubmitWithTooFewAgentsSaysHowMany) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Register(Reg("m01"), TimeFromMs(1000)).ok());
  auto id = (*p)->Submit(Launch(), TimeFromMs(1000));
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("needs 2 machines but 1"), std::string::npos) << id.status().message();
}

TEST(Plane, NegativePersistIntervalIsRefused) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  for (const char* m : {"m01", "m02"}) ASSERT_TRUE((*p)->Register(Reg(m), TimeFromMs(1000)).ok());
  JobLaunch l = Launch();
  l.persist_every = -1;
  auto id = (*p)->Submit(l, TimeFromMs(1000));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(id.status().message().find("persist_every"), std::string::npos) << id.status().message();
}

// A script that does not speak bulwark's elastic protocol, submitted with
// recovery elastic, would restart from step 0 at every narrowing: refused,
// one line that names the script and the fix. A script that trains through
// bulwark.elastic, and bulwark-train wherever it lives, are taken.
TEST(Plane, ElasticRecoveryForRanksThatDoNotSpeakItIsRefusedAtSubmit) {
  PlaneOptions o;
  const std::string dir = testing::MakeTempDir();
  o.db_path = dir + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  for (const char* m : {"m01", "m02"}) ASSERT_TRUE((*p)->Register(Reg(m), TimeFromMs(1000)).ok());
  const auto refusal = [&](const std::vector<std::string>& argv) {
    JobLaunch l = Launch();
    l.spec.recovery = controller::JobSpec::Recovery::kElastic;
    l.argv = argv;
    auto id = (*p)->Submit(l, TimeFromMs(1000));
    EXPECT_FALSE(id.ok());
    if (id.ok()) return std::string();
    EXPECT_EQ(id.status().code(), Status::Code::kInvalidArgument);
    const std::string why = id.status().message();
    EXPECT_NE(why.find("use recovery standby"), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << "one line";
    return why;
  };
  std::ofstream(dir + "/ddp.py") << "import torch\nfrom torch.nn.parallel import DistributedDataParallel\n";
  std::ofstream(dir + "/elastic.py") << "import bulwark.elastic\nrep = bulwark.elastic.Replicas(m, o, replicas=4)\n";
  EXPECT_NE(refusal({"/usr/bin/python3", "-u", dir + "/ddp.py"}).find(dir + "/ddp.py does not use bulwark.elastic"),
            std::string::npos);
  EXPECT_NE(refusal({"/usr/bin/python3", dir + "/missing.py"}).find("missing.py cannot be read"), std::string::npos);
  EXPECT_NE(refusal({"python3", "-m", "train"}).find("run with -c or -m"), std::string::npos);
  EXPECT_NE(refusal({"/opt/trainer", "--x"}).find("trainer does not speak bulwark's elastic protocol"),
            std::string::npos);
  JobLaunch l = Launch();
  l.spec.recovery = controller::JobSpec::Recovery::kElastic;
  l.argv = {"/opt/venv/bin/python3.11", dir + "/elastic.py", "--steps", "10"};
  EXPECT_TRUE((*p)->Submit(l, TimeFromMs(1000)).ok());
}

wire::InjectRequest Injection(const std::string& machine, const std::string& fault, int rank,
                              const std::string& where = "", double factor = 0) {
  wire::InjectRequest r;
  r.set_machine(machine);
  r.set_fault(fault);
  r.set_rank(rank);
  r.set_where(where);
  r.set_factor(factor);
  return r;
}

// Bad injection requests are refused with a line that names the fix, and
// nothing is queued for the agent.
TEST(Plane, BadInjectionsAreRefusedAndNothingIsSent) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Register(Reg("m01"), TimeFromMs(1000)).ok());
  struct Case {
    wire::InjectRequest req;
    const char* names;
  } cases[] = {
      {Injection("m01", "meltdown", 0), "hang, slow"},
      {Injection("m01", "slow", 0, "", 1.0), "above 1"},
      {Injection("m01", "slow", 0, "", 0.5), "above 1"},
      {Injection("m01", "slow", 0), "above 1"},
      {Injection("m01", "hang", 0, "disk"), "collective or compute"},
      {Injection("m01", "crash", 0, "", 2), "slow and slow-link only"},
      {Injection("m01", "slow-link", 0, "", 1.0), "above 1"},
      {Injection("m01", "nan", 0, "compute"), "hang only"},
  };
  for (const Case& c : cases) {
    Status st = (*p)->Inject(c.req);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << c.req.fault();
    EXPECT_NE(st.message().find(c.names), std::string::npos) << st.message();
  }
  std::string sent;
  bool superseded = false;
  auto cmd = (*p)->NextCommand("m01", (*p)->OpenStream("m01"), &sent, TimeFromMs(1001), &superseded);
  EXPECT_FALSE(cmd.has_value()) << "a refused injection reached the agent";
  Status no_hardware = (*p)->Inject(Injection("m01", "slow", 0, "", 2.0));
  EXPECT_EQ(no_hardware.code(), Status::Code::kFailedPrecondition) << no_hardware.ToString();
  EXPECT_NE(no_hardware.message().find("no emulated hardware"), std::string::npos) << no_hardware.message();
  EXPECT_TRUE((*p)->Inject(Injection("m01", "hang", 0, "compute")).ok());
}

// A fault of a machine's part goes into its emulated hardware, not to its
// agent (the cluster tests return such machines: `machine return` mends it).
TEST(Plane, APartsFaultBreaksTheEmulatedHardwareNotTheAgent) {
  const std::string dir = testing::MakeTempDir();
  const cluster::Layout layout{dir};
  ASSERT_EQ(::system(("mkdir -p " + layout.health("m01")).c_str()), 0);
  PlaneOptions o;
  o.db_path = dir + "/c.db";
  o.emulator = std::make_shared<cluster::Emulator>(layout);
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Register(Reg("m01"), TimeFromMs(1000)).ok());
  ASSERT_TRUE((*p)->Inject(Injection("m01", "device-fail", -1)).ok());
  ASSERT_TRUE((*p)->Inject(Injection("m01", "slow", -1, "", 3.0)).ok());
  const cluster::EmulatedHardware hw = cluster::HardwareOf(dir, "m01");
  EXPECT_NE(cluster::DeviceError(hw).find("Xid 48"), std::string::npos);
  EXPECT_EQ(cluster::ComputeSlowdown(hw), 3.0);
  std::string sent;
  bool superseded = false;
  const int64_t stream = (*p)->OpenStream("m01");
  for (int i = 0; i < 4; ++i) {
    auto cmd = (*p)->NextCommand("m01", stream, &sent, TimeFromMs(1001), &superseded);
    if (!cmd) break;
    EXPECT_NE(cmd->kind(), wire::Command::INJECT) << "the agent was sent " << cmd->id();
  }
}

TEST(Plane, UnknownMachineIsNotFoundByName) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Register(Reg("m01"), TimeFromMs(1000)).ok());
  Status inject = (*p)->Inject(Injection("m99", "crash", 0));
  EXPECT_EQ(inject.code(), Status::Code::kNotFound);
  EXPECT_NE(inject.message().find("m99"), std::string::npos) << inject.message();
  Status ret = (*p)->ReturnMachine("m42", TimeFromMs(1100)).status();
  EXPECT_EQ(ret.code(), Status::Code::kNotFound);
  EXPECT_NE(ret.message().find("m42"), std::string::npos) << ret.message();
}

}  // namespace
}  // namespace bulwark::plane
