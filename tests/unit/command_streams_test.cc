// Agents' command streams on gRPC's asynchronous API (plane/command_streams.h),
// over a real server on loopback and a fleet with a job: what an agent's
// stream reads, how a newer stream ends an older one, the token check, and
// that every way a call ends gives its stream back (cancelled while parked,
// the server shutting down).
#include "plane/command_streams.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/token.h"
#include "support/agent_messages.h"
#include "support/plane_commands.h"
#include "support/process.h"

namespace bulwark::plane {
namespace {

using namespace std::chrono_literals;

constexpr const char* kToken = "t0ken";

struct CommandsOnly : CommandStreams::Service {};

class CommandStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir();
    PlaneOptions o;
    o.db_path = dir_ + "/controller.db";
    auto f = Fleet::Open(o, dir_ + "/jobs", TimeFromMs(1000));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fleet_ = std::move(*f);
    for (const char* m : {"m01", "m02", "m03"}) ASSERT_TRUE(fleet_->For(m)->Register(testing::Reg(m), TimeFromMs(1000)).ok());
    JobLaunch l = testing::Launch();  // two ranks: m01 and m02; m03 waits in the pool
    l.spec.id = "a";
    ASSERT_TRUE(fleet_->Submit(l, /*named=*/true, TimeFromMs(1000)).ok());

    streams_ = std::make_unique<CommandStreams>(&service_, fleet_.get(), kToken);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&service_);
    streams_->AddQueues(&b);
    server_ = b.BuildAndStart();
    ASSERT_TRUE(server_ && port_ > 0);
    streams_->Start();
    waiting_ = streams_->open();
    stub_ = wire::AgentService::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { Shutdown(); }

  void Shutdown() {
    if (!server_) return;
    streams_->StopAccepting();
    server_->Shutdown(std::chrono::system_clock::now() + 500ms);
    streams_->Stop();
    server_.reset();
  }

  struct Call {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<wire::Command>> reader;
  };
  std::unique_ptr<Call> Open(const std::string& machine, const char* token = kToken) {
    auto c = std::make_unique<Call>();
    if (token != nullptr) c->ctx.AddMetadata(kTokenMetadataKey, token);
    c->ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    wire::CommandStreamRequest req;
    req.set_machine(machine);
    c->reader = stub_->Commands(&c->ctx, req);
    return c;
  }
  // Polls with a deadline until the streams' count of calls is `n`.
  bool OpenCountReaches(int n) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (streams_->open() != n && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    return streams_->open() == n;
  }

  std::string dir_;
  std::unique_ptr<Fleet> fleet_;
  CommandsOnly service_;
  std::unique_ptr<CommandStreams> streams_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  int waiting_ = 0;  // calls asked for ahead, before any agent came
  std::unique_ptr<wire::AgentService::Stub> stub_;
};

TEST_F(CommandStreamsTest, AStreamReadsItsMachinesCommandAndANewerStreamEndsItWithAborted) {
  auto first = Open("m01");
  wire::Command c;
  ASSERT_TRUE(first->reader->Read(&c));
  EXPECT_EQ(c.kind(), wire::Command::START_RANKS) << c.ShortDebugString();
  // The agent reconnects: the new stream is sent the desired command again,
  // and the old one ends.
  auto second = Open("m01");
  wire::Command again;
  ASSERT_TRUE(second->reader->Read(&again));
  EXPECT_EQ(again.id(), c.id());
  EXPECT_FALSE(first->reader->Read(&c));
  grpc::Status st = first->reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED) << st.error_message();
  EXPECT_EQ(st.error_message(), "a newer command stream replaced this one");
}

TEST_F(CommandStreamsTest, AStreamWithoutTheTokenIsRefused) {
  for (const char* token : {static_cast<const char*>(nullptr), "wrong"}) {
    auto call = Open("m01", token);
    wire::Command c;
    EXPECT_FALSE(call->reader->Read(&c));
    grpc::Status st = call->reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
  }
  EXPECT_TRUE(OpenCountReaches(waiting_)) << "a refused call's stream is deleted: " << streams_->open();
}

// An agent that goes away while its stream waits for a command (parked in
// the plane) gives the stream back: the plane lets go of it, and it ends.
TEST_F(CommandStreamsTest, ACancelledParkedStreamIsClosedAndDeleted) {
  auto call = Open("m03");  // in the pool: nothing to do, so it parks
  ASSERT_TRUE(OpenCountReaches(waiting_ + 1)) << streams_->open();
  call->ctx.TryCancel();
  wire::Command c;
  EXPECT_FALSE(call->reader->Read(&c));
  EXPECT_EQ(call->reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(OpenCountReaches(waiting_)) << streams_->open();
  // The machine's next stream is served as before.
  auto next = Open("m01");
  ASSERT_TRUE(next->reader->Read(&c));
  EXPECT_EQ(c.kind(), wire::Command::START_RANKS);
}

// The server's shutdown ends every stream, parked or not, and leaves none
// behind to start an operation on a queue that is shut down.
TEST_F(CommandStreamsTest, TheServersShutdownEndsEveryStream) {
  std::vector<std::unique_ptr<Call>> calls;
  calls.push_back(Open("m01"));
  calls.push_back(Open("m02"));
  wire::Command c;
  for (auto& call : calls) ASSERT_TRUE(call->reader->Read(&c));  // then parked
  for (int i = 0; i < 28; ++i) calls.push_back(Open("s" + std::to_string(i)));  // parked from the start
  ASSERT_TRUE(OpenCountReaches(waiting_ + 30)) << streams_->open();
  const auto start = std::chrono::steady_clock::now();
  Shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(streams_->open(), 0);
  for (auto& call : calls) {
    while (call->reader->Read(&c)) {
    }
    EXPECT_NE(call->reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
}

}  // namespace
}  // namespace bulwark::plane
