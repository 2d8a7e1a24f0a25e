// The Slurm backend without Slurm: parsers fed what Slurm 22.05 printed,
// and the backend's worker against a scripted Slurm (FakeSlurm) that fails
// and hangs on request. The real thing: slurm_cluster_test.cc.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <stdlib.h>

#include "cluster/slurm/slurm_backend.h"
#include "cluster/slurm/slurm_text.h"
#include "cluster/slurm/slurm_up.h"
#include "support/process.h"

namespace bulwark::cluster {
namespace {

// ---------------------------------------------------------------------------
// parsers and command lines
// ---------------------------------------------------------------------------

// `scontrol --oneliner show node n2` after a drain, as Slurm 22.05.8 printed it
// (OS= has spaces; the reason has a '=' and Slurm's stamp).
const char* kDrainedLine =
    "NodeName=n2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=2.10 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=vm Port=51102 "
    "Version=22.05.8 OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 AllocMem=0 FreeMem=21013 "
    "Sockets=2 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=test  "
    "BootTime=2026-11-22T20:19:04 SlurmdStartTime=2026-11-23T02:30:15 LastBusyTime=2026-11-23T02:30:15 "
    "CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
    "ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=bulwark incident 1: a=b machine down [root@2026-11-23T02:30:15]\n";

TEST(SlurmText, ParsesADrainedNodeAndItsReasonWithoutTheStamp) {
  Result<SlurmNode> n = ParseNodeLine(kDrainedLine);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->name, "n2");
  EXPECT_EQ(n->state, "IDLE+DRAIN");
  EXPECT_TRUE(n->drain);
  EXPECT_EQ(n->reason, "bulwark incident 1: a=b machine down");
  EXPECT_TRUE(DrainedByBulwark(*n));
}

TEST(SlurmText, AnIdleNodeHasNoDrainAndNoReason) {
  Result<SlurmNode> n = ParseNodeLine("NodeName=n1 Arch=x86_64 State=IDLE ThreadsPerCore=1 ExtSensorsTemp=n/s\n");
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(n->drain);
  EXPECT_EQ(n->reason, "");
  // DRAINING is not a word of its own: it is ALLOCATED+DRAIN.
  n = ParseNodeLine("NodeName=n3 State=ALLOCATED+DRAIN Reason=ops: bad fan [admin@2026-11-23T02:29:53]");
  ASSERT_TRUE(n.ok());
  EXPECT_TRUE(n->drain);
  EXPECT_FALSE(DrainedByBulwark(*n)) << "an administrator's drain is not bulwark's to resume";
}

TEST(SlurmText, RefusesWhatIsNotANode) {
  EXPECT_FALSE(ParseNodeLine("Node n9 not found\n").ok());
  EXPECT_FALSE(ParseNodeLine("").ok());
}

TEST(SlurmText, ReadsSubmittedJobIdsAndSteps) {
  EXPECT_EQ(*ParseSubmittedJob("4\n"), "4");
  EXPECT_EQ(*ParseSubmittedJob("12;bulwarktest\n"), "12");
  EXPECT_FALSE(ParseSubmittedJob("sbatch: error: Batch job submission failed").ok());
  const std::vector<SlurmStep> steps = ParseSteps("3.1|bulwark-agent\n3.batch|batch\n\nnonsense\n");
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].id, "3.1");
  EXPECT_EQ(steps[0].name, "bulwark-agent");
  EXPECT_EQ(ParseLines(" n1\n\nn2 \n"), (std::vector<std::string>{"n1", "n2"}));
}

TEST(SlurmText, DrainReasonsAreOneLinePrefixedAndBounded) {
  EXPECT_EQ(DrainReason("incident 3: machine n1 lost\nits heartbeat"), "bulwark incident 3: machine n1 lost its heartbeat");
  EXPECT_EQ(DrainReason("bulwark said so"), "bulwark said so");
  EXPECT_EQ(DrainReason(std::string(500, 'x')).size(), 200u);
}

SlurmRecord Record() {
  SlurmRecord r;
  r.job = "7";
  r.batch_host = "n1";
  r.allocation = {"n1", "n2", "n3", "n4"};
  r.agents = {"n1", "n2", "n3"};
  r.grow = 1;
  r.bulwark = "/opt/bulwark/bin/bulwark";
  r.dir = "/shared/run";
  return r;
}

TEST(SlurmText, RecordRoundTripsAndBadRecordsAreRefused) {
  Result<SlurmRecord> r = DecodeSlurmRecord(EncodeSlurmRecord(Record()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->agents, Record().agents);
  EXPECT_EQ(r->grow, 1);
  EXPECT_FALSE(DecodeSlurmRecord("{\"kind\":\"slurm\"}").ok());
  EXPECT_FALSE(DecodeSlurmRecord("not json").ok());
  SlurmRecord quoted = Record();
  quoted.dir = "/shared/it's";
  EXPECT_FALSE(DecodeSlurmRecord(EncodeSlurmRecord(quoted)).ok()) << "a quote would break the agent job's script";
}

TEST(SlurmText, AgentCommandLinesNameTheNodeAndTheMachine) {
  const std::vector<std::string> step = AgentStepArgv(Record(), "n3");
  EXPECT_EQ(step.front(), "srun");
  EXPECT_NE(std::find(step.begin(), step.end(), "--jobid=7"), step.end());
  EXPECT_NE(std::find(step.begin(), step.end(), "--nodelist=n3"), step.end());
  EXPECT_EQ(std::vector<std::string>(step.end() - 2, step.end()), (std::vector<std::string>{"--machine", "n3"}));
  const std::vector<std::string> any = AgentJobArgv(Record(), "/shared/run/slurm/job-%j.log", "");
  for (const std::string& a : any) EXPECT_EQ(a.rfind("--nodelist", 0), std::string::npos) << a;
  EXPECT_EQ(any.back(), "--wrap=exec '/opt/bulwark/bin/bulwark' agent --dir '/shared/run' --machine \"$SLURMD_NODENAME\"");
  const std::vector<std::string> on = AgentJobArgv(Record(), "x", "n2");
  EXPECT_NE(std::find(on.begin(), on.end(), "--nodelist=n2"), on.end());
}

// ---------------------------------------------------------------------------
// bulwark up --backend slurm: reading the allocation
// ---------------------------------------------------------------------------

// `scontrol show hostnames n[1-3]` as Slurm prints it; nothing else.
class HostnamesRunner : public CommandRunner {
 public:
  CommandResult Run(const std::vector<std::string>& argv, double) override {
    CommandResult r;
    r.exit_code = argv.size() == 4 && argv[3] == "n[1-3]" ? 0 : 1;
    r.out = "n1\nn2\nn3\n";
    return r;
  }
};

TEST(SlurmUp, PicksAgentsFromTheAllocationAndKeepsTheRestSpare) {
  ::setenv("SLURM_JOB_ID", "7", 1);
  ::setenv("SLURM_JOB_NODELIST", "n[1-3]", 1);
  ::setenv("SLURMD_NODENAME", "n1", 1);
  HostnamesRunner run;
  Result<SlurmRecord> r = PlanSlurmUp(run, {1, 1, 0, "/b/bulwark", "/shared/d"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->job, "7");
  EXPECT_EQ(r->batch_host, "n1");
  EXPECT_EQ(r->allocation, (std::vector<std::string>{"n1", "n2", "n3"}));
  EXPECT_EQ(r->agents, (std::vector<std::string>{"n1", "n2"})) << "n3 stays spare";
  r = PlanSlurmUp(run, {0, 1, 0, "/b/bulwark", "/shared/d"});  // --machines defaults to the rest
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->agents.size(), 3u);
  r = PlanSlurmUp(run, {3, 1, 0, "/b/bulwark", "/shared/d"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("allocate more nodes"), std::string::npos) << r.status().message();
  ::unsetenv("SLURM_JOB_ID");
  r = PlanSlurmUp(run, {1, 1, 0, "/b/bulwark", "/shared/d"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not inside a Slurm allocation"), std::string::npos) << r.status().message();
  ::unsetenv("SLURM_JOB_NODELIST");
  ::unsetenv("SLURMD_NODENAME");
}

TEST(SlurmUp, TheControllersHostMustResolve) {
  EXPECT_EQ(*ControllerHost("127.0.0.1"), "127.0.0.1");
  Result<std::string> bad = ControllerHost("no-such-host.invalid");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--listen"), std::string::npos) << bad.status().message();
}

// ---------------------------------------------------------------------------
// the backend's worker against a scripted Slurm
// ---------------------------------------------------------------------------

// Just enough Slurm: nodes with state and reason, jobs with node lists.
// `fail_updates` makes that many `scontrol update` calls fail first;
// `hold` makes every call wait until it is cleared.
struct FakeSlurm {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, SlurmNode> nodes;
  std::map<std::string, std::vector<std::string>> jobs;
  std::vector<std::vector<std::string>> calls;
  int fail_updates = 0;
  bool hold = false;
  int next_job = 100;

  CommandResult Run(const std::vector<std::string>& argv) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return !hold; });
    calls.push_back(argv);
    CommandResult r;
    r.exit_code = 0;
    auto arg = [&](const std::string& prefix) {
      for (const std::string& a : argv) {
        if (a.rfind(prefix, 0) == 0) return a.substr(prefix.size());
      }
      return std::string();
    };
    const std::string tool = argv[0];
    if (tool == "scontrol" && argv[1] == "update") {
      if (fail_updates > 0) {
        --fail_updates;
        r.exit_code = 1;
        r.err = "slurm_update error: Unable to contact slurm controller";
        return r;
      }
      if (!arg("NodeName=").empty()) {
        SlurmNode& n = nodes[arg("NodeName=")];
        if (arg("State=") == "DRAIN") {
          n.drain = true;
          n.reason = arg("Reason=");
        } else {
          n.drain = false;
          n.reason.clear();
        }
      } else {
        std::vector<std::string> keep;
        const std::string list = arg("NodeList=");
        for (size_t b = 0; b < list.size();) {
          size_t e = list.find(',', b);
          if (e == std::string::npos) e = list.size();
          keep.push_back(list.substr(b, e - b));
          b = e + 1;
        }
        jobs[arg("JobId=")] = keep;
      }
    } else if (tool == "scontrol" && argv[1] == "--oneliner") {
      const SlurmNode& n = nodes[argv[4]];
      r.out = "NodeName=" + argv[4] + " Arch=x86_64 State=" + std::string(n.drain ? "IDLE+DRAIN" : "IDLE") +
              " Weight=1" + (n.drain ? " Reason=" + n.reason + " [root@2026-11-23T02:30:15]" : "") + "\n";
    } else if (tool == "scontrol" && argv[1] == "show") {  // hostnames: our lists are comma-separated
      for (char c : argv[3]) r.out += c == ',' ? '\n' : c;
      r.out += "\n";
    } else if (tool == "squeue") {
      auto it = jobs.find(arg("--jobs="));
      if (it == jobs.end()) {
        r.exit_code = 1;
        r.err = "slurm_load_jobs error: Invalid job id specified";
        return r;
      }
      for (size_t i = 0; i < it->second.size(); ++i) r.out += (i ? "," : "") + it->second[i];
      r.out += "\n";
    } else if (tool == "sbatch") {
      const std::string id = std::to_string(next_job++);
      jobs[id] = {arg("--nodelist=").empty() ? "n9" : arg("--nodelist=")};
      r.out = id + "\n";
    } else if (tool == "scancel") {
      jobs.erase(argv[1]);
    }
    return r;
  }

  size_t Count(const std::string& tool, const std::string& word) {
    std::lock_guard<std::mutex> lock(mu);
    size_t n = 0;
    for (const auto& c : calls) {
      if (c[0] == tool && std::find(c.begin(), c.end(), word) != c.end()) ++n;
    }
    return n;
  }
};

class ScriptedRunner : public CommandRunner {
 public:
  explicit ScriptedRunner(FakeSlurm* slurm) : slurm_(slurm) {}
  CommandResult Run(const std::vector<std::string>& argv, double) override { return slurm_->Run(argv); }

 private:
  FakeSlurm* slurm_;
};

class SlurmBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_.dir = testing::MakeTempDir();
    slurm_.jobs["7"] = {"n1", "n2", "n3", "n4"};
  }

  std::unique_ptr<SlurmBackend> Make(SlurmRecord r = Record()) {
    SlurmBackendOptions o;
    o.first_retry = std::chrono::milliseconds(10);
    o.max_retry = std::chrono::milliseconds(50);
    o.max_attempts = 5;
    return std::make_unique<SlurmBackend>(
        layout_, std::move(r), std::make_unique<ScriptedRunner>(&slurm_),
        [this](const std::vector<std::string>& argv, const std::string&) {
          std::lock_guard<std::mutex> lock(mu_);
          spawned_.push_back(argv);
          return Status::OK();
        },
        [this](const std::string& line) {
          std::lock_guard<std::mutex> lock(mu_);
          log_ += line + "\n";
        });
  }

  Layout layout_;
  FakeSlurm slurm_;
  std::mutex mu_;
  std::vector<std::vector<std::string>> spawned_;
  std::string log_;
};

TEST_F(SlurmBackendTest, DrainRetriesAFailingScontrolThenReleasesTheNodeFromTheJob) {
  slurm_.fail_updates = 2;
  auto b = Make();
  b->Drain("n2", "incident 4: machine n2 lost its heartbeat");
  ASSERT_TRUE(b->WaitIdle(60));
  EXPECT_TRUE(slurm_.nodes["n2"].drain);
  EXPECT_EQ(slurm_.nodes["n2"].reason, "bulwark incident 4: machine n2 lost its heartbeat");
  EXPECT_EQ(slurm_.jobs["7"], (std::vector<std::string>{"n1", "n3", "n4"}));
  EXPECT_EQ(slurm_.Count("scontrol", "State=DRAIN"), 3u) << "two failures, then the drain";
  EXPECT_NE(log_.find("retrying"), std::string::npos) << log_;
}

TEST_F(SlurmBackendTest, ANodeBulwarkDrainedKeepsItsFirstReason) {
  auto b = Make();
  b->Drain("n2", "incident 4: machine n2 lost its heartbeat");
  ASSERT_TRUE(b->WaitIdle(60));
  b->Drain("n2", "incident 4: machine n2 is evicted");  // a restarted controller says it again
  ASSERT_TRUE(b->WaitIdle(60));
  EXPECT_EQ(slurm_.nodes["n2"].reason, "bulwark incident 4: machine n2 lost its heartbeat");
  EXPECT_EQ(slurm_.Count("scontrol", "State=DRAIN"), 1u);
}

TEST_F(SlurmBackendTest, TheBatchHostIsDrainedButStaysInTheJob) {
  auto b = Make();
  b->Drain("n1", "incident 1: device failed");
  ASSERT_TRUE(b->WaitIdle(60));
  EXPECT_TRUE(slurm_.nodes["n1"].drain);
  EXPECT_EQ(slurm_.jobs["7"].size(), 4u);
}

TEST_F(SlurmBackendTest, CallsNeverWaitForSlurm) {
  {
    std::lock_guard<std::mutex> lock(slurm_.mu);
    slurm_.hold = true;  // every Slurm command hangs
  }
  auto b = Make();
  b->Drain("n2", "incident 1: x");  // returns although the worker is stuck in scontrol
  b->Resume("n3", false);
  b->Acquire("replenish/a1/short1", 1);
  EXPECT_FALSE(b->WaitIdle(0.2));
  {
    std::lock_guard<std::mutex> lock(slurm_.mu);
    slurm_.hold = false;
  }
  slurm_.cv.notify_all();
  EXPECT_TRUE(b->WaitIdle(60));
  EXPECT_TRUE(slurm_.nodes["n2"].drain);
}

TEST_F(SlurmBackendTest, ResumeUndoesOnlyBulwarksOwnDrainAndRestartsTheAgent) {
  slurm_.nodes["n3"] = {"n3", "IDLE+DRAIN", true, "ops: replace the fan"};
  auto b = Make();
  b->Drain("n2", "incident 2: nic");
  ASSERT_TRUE(b->WaitIdle(60));
  b->Resume("n2", /*start_agent=*/false);
  b->Resume("n3", /*start_agent=*/true);
  b->Resume("n4", /*start_agent=*/true);  // never drained, its agent gone
  ASSERT_TRUE(b->WaitIdle(60));
  EXPECT_FALSE(slurm_.nodes["n2"].drain);
  EXPECT_EQ(slurm_.Count("scontrol", "State=RESUME"), 1u) << "only n2 was bulwark's to resume";
  EXPECT_TRUE(slurm_.nodes["n3"].drain) << "an administrator's drain stays";
  EXPECT_NE(log_.find("drained by someone else"), std::string::npos) << log_;
  // n4 is still in the job: its agent comes back as a step there.
  ASSERT_EQ(spawned_.size(), 1u);
  EXPECT_EQ(spawned_[0].back(), "n4");
}

TEST_F(SlurmBackendTest, AResumedNodeOutsideTheJobGetsItsAgentInAJobOfItsOwn) {
  auto b = Make();
  b->Drain("n2", "incident 2: nic");
  ASSERT_TRUE(b->WaitIdle(60));  // n2 left the job
  b->Resume("n2", true);
  ASSERT_TRUE(b->WaitIdle(60));
  EXPECT_EQ(slurm_.Count("sbatch", "--nodelist=n2"), 1u);
  EXPECT_TRUE(spawned_.empty());
}

TEST_F(SlurmBackendTest, AcquireTakesSpareNodesThenGrowsWithinItsLimit) {
  auto b = Make();  // agents on n1..n3, n4 spare, grow 1
  b->Acquire("replenish/a1/short3", 3);
  b->Acquire("replenish/a1/short3", 3);  // the same decision again: nothing more
  ASSERT_TRUE(b->WaitIdle(60));
  ASSERT_EQ(spawned_.size(), 1u);
  EXPECT_EQ(spawned_[0].back(), "n4");
  EXPECT_EQ(slurm_.Count("sbatch", "--exclusive"), 1u) << "one node from a new job, as --grow allows";
  EXPECT_NE(log_.find("stays 1 short"), std::string::npos) << log_;
  // A restarted controller knows the agents and jobs it started before:
  // n4 is taken and --grow is used up.
  b.reset();
  auto again = Make();
  again->Acquire("replenish/a2/short1", 1);
  ASSERT_TRUE(again->WaitIdle(60));
  EXPECT_EQ(spawned_.size(), 1u);
  EXPECT_EQ(slurm_.Count("sbatch", "--exclusive"), 1u);
}

}  // namespace
}  // namespace bulwark::cluster
