// End to end: a real local cluster (controller + agents as processes) runs
// the tiny trainer while faults are injected. Every wait polls `bulwark
// status --json` against a deadline; nothing relies on a fixed sleep.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <map>
#include <functional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "bulwark.grpc.pb.h"
#include "cluster/local/emulated_hardware.h"
#include "support/cluster_fixture.h"
#include "support/process.h"

namespace bulwark {
namespace {


TEST_F(Cluster, SurvivesCrashDeviceFailureControllerRestartAndMachineDown) {
  auto up = Bulwark({"up", "--machines", "2", "--standby", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  WriteJob();
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("first steps", 45, [](const json& s) { return s["job"]["last_step"] >= 30; });
  ASSERT_EQ(s["job"]["placement"], json({"m01", "m02"}));

  // 1. A plain crash: reattempt in place, resume from the checkpoint.
  int64_t gen = s["job"]["generation"];
  int64_t before = s["job"]["last_step"];
  Inject("crash", "m01");
  s = WaitFor("restart after crash", 45, [&](const json& s) {
    return s["job"]["generation"] > gen && s["job"]["state"] == "running" && s["job"]["last_step"] > before + 20;
  });
  EXPECT_EQ(s["job"]["placement"], json({"m01", "m02"}));
  Report("crash");
  json inc = Query("incidents");
  ASSERT_EQ(inc.size(), 1u);
  EXPECT_EQ(inc[0]["resolution"], "reattempt");
  EXPECT_NE(inc[0]["cause"].get<std::string>().find("rank 0 on m01"), std::string::npos) << inc.dump();
  EXPECT_NE(inc[0]["cause"].get<std::string>().find("exception"), std::string::npos) << inc.dump();
  EXPECT_GT(inc[0]["restored_step"].get<int64_t>(), 0);  // resumed from a checkpoint, not from scratch

  // 2. An uncorrectable device error: evict, swap in the standby.
  gen = s["job"]["generation"];
  before = s["job"]["last_step"];
  Inject("device-fail", "m02");
  s = WaitFor("standby swapped in", 45, [&](const json& s) {
    return s["job"]["generation"] > gen && s["job"]["placement"] == json({"m01", "m03"}) &&
           s["job"]["last_step"] > before + 20 && s["job"]["state"] == "running";
  });
  EXPECT_EQ(MachineState(s, "m02"), "evicted");
  Report("device-fail");

  // 3. The controller dies by SIGKILL and comes back: the job trains on
  // meanwhile and nothing is lost.
  gen = s["job"]["generation"];
  std::ifstream pidf(dir_ + "/controller.pid");
  pid_t pid = 0;
  pidf >> pid;
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  const int64_t rank_log_size_at_kill = [&] {
    struct stat st;
    return ::stat((dir_ + "/machines/m01/ranks/rank-0.log").c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
  }();
  controller_ = std::make_unique<testing::Process>(
      std::vector<std::string>{testing::BinDir() + "/bulwark", "controller", "--dir", dir_});
  // Back with every agent: each one heard since the restart (agents take
  // seconds to reconnect; a machine that dies before its agent did is found
  // only after the reconnect grace, not the heartbeat timeout).
  // When each agent was first heard, in seconds of the new controller's
  // uptime (status is polled every few hundred ms: that is the resolution).
  std::map<std::string, double> back_after;
  s = WaitFor("controller back with agents", 45, [&](const json& s) {
    const double up = s["controller_up_s"].get<double>();
    bool all = true;
    for (const json& m : s["machines"]) {
      const double heard = m["last_heard_s_ago"].get<double>();
      if (heard < up && !back_after.count(m["id"])) back_after[m["id"]] = up - heard;
      if (m["state"] != "evicted" && heard >= up) all = false;
    }
    return all && s["job"]["last_step"] > before + 60 && s["job"]["state"] == "running";
  });
  for (const auto& [m, after] : back_after) {
    std::printf("[ timing ] agent %s reached the restarted controller %.2f s after it started\n", m.c_str(), after);
  }
  EXPECT_EQ(s["job"]["generation"], gen) << "a controller restart must not restart the job";
  EXPECT_EQ(Query("incidents").size(), 2u);
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/machines/m01/ranks/rank-0.log").c_str(), &st), 0);
  EXPECT_GT(static_cast<int64_t>(st.st_size), rank_log_size_at_kill);

  // 4. The operator returns m02; then m03 dies outright: m02 takes over.
  auto ret = Bulwark({"machine", "return", "--machine", "m02"});
  ASSERT_EQ(ret.exit_code, 0) << ret.err;
  WaitFor("m02 back on standby", 20, [&](const json& s) { return MachineState(s, "m02") == "standby"; });
  s = Query("status");
  before = s["job"]["last_step"];
  Inject("machine-down", "m03");
  s = WaitFor("m02 replaces m03", 45, [&](const json& s) {
    return s["job"]["placement"] == json({"m01", "m02"}) && s["job"]["last_step"] > before + 20 &&
           s["job"]["state"] == "running";
  });
  EXPECT_EQ(MachineState(s, "m03"), "evicted");
  Report("machine-down");
  // Returning a machine whose agent is gone says so, instead of leaving it
  // "joining" without a word.
  auto dead = Bulwark({"machine", "return", "--machine", "m03"});
  ASSERT_EQ(dead.exit_code, 0) << dead.err;
  EXPECT_NE(dead.out.find("stays 'joining' until its agent runs again"), std::string::npos) << dead.out;
  for (const json& m : Query("status")["machines"]) {
    if (m["id"] == "m03") { EXPECT_NE(m.value("reason", "").find("agent is silent"), std::string::npos) << m.dump(); }
  }

  // 5. A single NIC flap is tolerated: no new incident.
  const size_t incidents = Query("incidents").size();
  gen = s["job"]["generation"];
  Inject("nic-flap", "m01");
  before = s["job"]["last_step"];
  s = WaitFor("training past the flap", 20, [&](const json& s) { return s["job"]["last_step"] > before + 100; });
  EXPECT_EQ(s["job"]["generation"], gen);
  EXPECT_EQ(Query("incidents").size(), incidents);

  // 6. A second flap within the window condemns m01. No standby is left
  // (m03 is dead), so the job waits; the operator returns m01 after repair
  // and the job resumes on it.
  const cluster::EmulatedHardware m01 = cluster::HardwareOf(dir_, "m01");
  WaitFor("m01's link back up", 10, [&](const json&) { return cluster::NicUp(m01, cluster::UnixMs()); });
  Inject("nic-flap", "m01");
  s = WaitFor("job waiting for a machine", 30, [&](const json& s) {
    return MachineState(s, "m01") == "evicted" && s["job"]["state"] == "waiting for machines";
  });
  Report("nic-flap x2");
  before = s["job"]["last_step"];
  ret = Bulwark({"machine", "return", "--machine", "m01"});
  ASSERT_EQ(ret.exit_code, 0) << ret.err;
  s = WaitFor("job resumed on the returned m01", 45, [&](const json& s) {
    return s["job"]["state"] == "running" && s["job"]["last_step"] > before + 20;
  });
  EXPECT_EQ(MachineState(s, "m01"), "active");

  json ledger = Query("ledger");
  EXPECT_GT(ledger["cumulative"]["ettr"].get<double>(), 0.0);
  std::printf("[ ledger ] %s\n", ledger["cumulative"].dump().c_str());
}

TEST_F(Cluster, FinishedJobIsReportedCompleted) {
  auto up = Bulwark({"up", "--machines", "2"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  std::ofstream(root_ + "/job.yaml") << "name: short\nworld_size: 2\nargs: [--config, tiny, --data, " << *data_
                                     << ", --steps, '40', --log-format, json, --threads, '1']\n";
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  json s = WaitFor("completion", 60, [](const json& s) { return s["job"]["state"] == "completed"; });
  EXPECT_EQ(s["job"]["done_step"], 40);
  EXPECT_EQ(Query("incidents").size(), 0u);
}

// `up --tls`: controller, agents and CLI speak mutual TLS; a job runs and a
// crash is recovered over it, and a caller without the cluster's
// certificate is not even heard (with or without the token).
TEST_F(Cluster, MutualTlsCarriesAJobThroughAFaultAndShutsOutOthers) {
  auto up = Bulwark({"up", "--machines", "2", "--standby", "1", "--tls"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  struct stat st;
  for (const char* key : {"ca.key", "controller.key", "member.key"}) {
    ASSERT_EQ(::stat((dir_ + "/tls/" + key).c_str(), &st), 0) << key;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << key;
  }
  WriteJob();
  auto sub = Bulwark({"submit", root_ + "/job.yaml"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  WaitFor("first steps over TLS", 45, [](const json& s) { return s["job"]["last_step"] >= 20; });
  Inject("crash", "m01");
  WaitFor("restart after the crash", 45, [](const json& s) {
    return s["job"]["generation"] == 2 && s["job"]["state"] == "running" && s["job"]["incidents"] == 1;
  });
  Report("crash (TLS)");

  std::ifstream addr_file(dir_ + "/controller.addr");
  std::string addr;
  addr_file >> addr;
  std::string token;
  std::ifstream(dir_ + "/token") >> token;
  auto plain = wire::ControlService::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  ctx.AddMetadata("x-bulwark-token", token);
  wire::InjectRequest req;
  req.set_machine("m01");
  req.set_fault("crash");
  wire::InjectReply reply;
  grpc::Status g = plain->Inject(&ctx, req, &reply);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::UNAVAILABLE) << "plaintext reached a TLS controller: " << g.error_message();
  EXPECT_EQ(Query("incidents").size(), 1u) << "the plaintext injection must not have happened";
}

TEST_F(Cluster, CallsWithoutTheTokenAreRefusedAndLogged) {
  auto up = Bulwark({"up", "--machines", "1"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  std::ifstream addr_file(dir_ + "/controller.addr");
  std::string addr;
  addr_file >> addr;
  auto stub = wire::AgentService::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  auto control = wire::ControlService::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  // Every call that changes something, without a token and with a wrong one.
  for (const char* token : {"", "not-the-token"}) {
    auto context = [&](grpc::ClientContext& ctx) {
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      if (*token) ctx.AddMetadata("x-bulwark-token", token);
    };
    std::map<std::string, grpc::Status> got;
    {
      grpc::ClientContext ctx;
      context(ctx);
      wire::RegisterRequest req;
      req.set_machine("intruder");
      wire::RegisterReply reply;
      got["Register"] = stub->Register(&ctx, req, &reply);
    }
    {
      grpc::ClientContext ctx;
      context(ctx);
      wire::ReportRequest req;
      req.set_machine("m01");
      wire::ReportReply reply;
      got["Report"] = stub->Report(&ctx, req, &reply);
    }
    {
      grpc::ClientContext ctx;
      context(ctx);
      wire::StacksRequest req;
      req.set_machine("m01");
      wire::StacksReply reply;
      got["UploadStacks"] = stub->UploadStacks(&ctx, req, &reply);
    }
    {
      grpc::ClientContext ctx;
      context(ctx);
      wire::CommandStreamRequest req;
      req.set_machine("m01");
      auto reader = stub->Commands(&ctx, req);
      wire::Command c;
      EXPECT_FALSE(reader->Read(&c)) << "a command reached a caller without the token";
      got["Commands"] = reader->Finish();
    }
    {
      grpc::ClientContext ctx;
      context(ctx);
      wire::SubmitRequest req;
      wire::SubmitReply reply;
      got["Submit"] = control->Submit(&ctx, req, &reply);
    }
    {
      grpc::ClientContext ctx;
      context(ctx);
      wire::InjectRequest req;
      req.set_machine("m01");
      wire::InjectReply reply;
      got["Inject"] = control->Inject(&ctx, req, &reply);
    }
    {
      grpc::ClientContext ctx;
      context(ctx);
      wire::ReturnMachineRequest req;
      req.set_machine("m01");
      wire::ReturnMachineReply reply;
      got["ReturnMachine"] = control->ReturnMachine(&ctx, req, &reply);
    }
    for (const auto& [call, g] : got) {
      EXPECT_EQ(g.error_code(), grpc::StatusCode::UNAUTHENTICATED) << call << " with token '" << token << "': " << g.error_message();
    }
  }
  // A CLI without the token (another directory with only the address) may
  // read but not act.
  const std::string other = root_ + "/other";
  ASSERT_EQ(::mkdir(other.c_str(), 0700), 0);
  std::ofstream(other + "/controller.addr") << addr << "\n";
  auto read = testing::Run({testing::BinDir() + "/bulwark", "status", "--dir", other});
  EXPECT_EQ(read.exit_code, 0) << read.err;
  auto act = testing::Run({testing::BinDir() + "/bulwark", "inject", "kill", "--machine", "m01", "--dir", other});
  EXPECT_NE(act.exit_code, 0);
  EXPECT_NE(act.err.find("cluster token"), std::string::npos) << act.err;

  std::ifstream log(dir_ + "/controller.log");
  std::string text((std::istreambuf_iterator<char>(log)), {});
  for (const char* call : {"Register", "Report", "UploadStacks", "Commands", "Submit", "Inject", "ReturnMachine"}) {
    EXPECT_NE(text.find(std::string("refused ") + call), std::string::npos) << call << "\n" << text;
  }
  json after = Query("status");
  EXPECT_EQ(after["machines"].size(), 1u) << "the intruder must not be registered";
  EXPECT_TRUE(after["job"].is_null()) << "nothing was submitted: " << after.dump();
  EXPECT_TRUE(Query("incidents").empty()) << "nothing was injected or reported";
}

// A copy of the binary away from the build and source trees (what an
// installed one is) starts a cluster whose agents come up: nothing in it
// points back at the tree it was built from.
TEST_F(Cluster, ACopiedBinaryStartsItsAgents) {
  const std::string bin = root_ + "/elsewhere/bin";
  std::filesystem::create_directories(bin);
  std::filesystem::copy_file(testing::BinDir() + "/bulwark", bin + "/bulwark");
  std::filesystem::permissions(bin + "/bulwark", std::filesystem::perms::owner_all);
  auto up = testing::Run({bin + "/bulwark", "up", "--machines", "2", "--dir", dir_}, {}, 60);
  ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
  auto status = testing::Run({bin + "/bulwark", "status", "--json", "--dir", dir_}, {}, 10);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  json s = json::parse(status.out, nullptr, false);
  ASSERT_TRUE(s.is_object()) << status.out;
  EXPECT_EQ(s["machines"].size(), 2u) << status.out;
  testing::Run({bin + "/bulwark", "down", "--dir", dir_}, {}, 60);
}

TEST_F(Cluster, RestartWithoutDatabaseIsAClearError) {
  // A controller pointed at a directory with no database must not start
  // from nothing (it would forget the job).
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  std::ofstream(dir_ + "/controller.addr") << "127.0.0.1:1\n";
  { std::ofstream t(dir_ + "/token"); t << "x\n"; }
  ::chmod((dir_ + "/token").c_str(), 0600);
  auto r = testing::Run({testing::BinDir() + "/bulwark", "controller", "--dir", dir_}, {}, 20);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("controller.db does not exist"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace bulwark
