// The NCCL group's parts that need no GPU (src/trainer/comm/nccl_group.h):
// the deadline loop on a fake clock, the dtype map, the preconditions, the
// one-line errors and their codes, and Create on a host without a GPU
// (this test is registered only where nccl.h and libnccl were found).
#include "trainer/comm/nccl_group.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>

namespace bulwark::trainer {
namespace {

// A clock that moves only when WaitFor pauses: `step_s` a pause.
struct FakeClock {
  double now = 100.0;
  int pauses = 0;
  PollClock Make(double step_s) {
    return {[this] { return now; }, [this, step_s] {
      now += step_s;
      ++pauses;
    }};
  }
};

TEST(NcclGroupWaitFor, AFinishedOperationIsSeenEvenWithAZeroTimeout) {
  FakeClock clock;
  int polls = 0;
  const auto poll = [&](std::string*) {
    ++polls;
    return PollState::kDone;
  };
  Status st = WaitFor("NCCL all-reduce", poll, 0.0, clock.Make(1));
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(polls, 1);
  EXPECT_EQ(clock.pauses, 0);
}

TEST(NcclGroupWaitFor, PendingPastTheDeadlineIsOneLineUnavailable) {
  FakeClock clock;
  int polls = 0;
  const auto poll = [&](std::string*) {
    ++polls;
    return PollState::kPending;
  };
  Status st = WaitFor("NCCL all-reduce", poll, 1.0, clock.Make(0.25));
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_EQ(st.message(), "NCCL all-reduce: timed out after 1 s");
  EXPECT_EQ(polls, 5);  // at 0, 0.25, 0.5, 0.75 and 1.0 s: the last one is at the deadline
}

TEST(NcclGroupWaitFor, AFailureEndsTheWaitAtOnceWithItsReason) {
  FakeClock clock;
  int polls = 0;
  const auto poll = [&](std::string* failure) {
    if (++polls < 3) return PollState::kPending;
    *failure = "peer lost (remote error): x";
    return PollState::kFailed;
  };
  Status st = WaitFor("NCCL all-reduce", poll, 60.0, clock.Make(0.001));
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_EQ(st.message(), "NCCL all-reduce: peer lost (remote error): x");
  EXPECT_EQ(polls, 3);
  EXPECT_EQ(clock.pauses, 2);
}

TEST(NcclGroupWaitFor, DoneBeforeTheDeadlineIsOk) {
  FakeClock clock;
  int polls = 0;
  Status st = WaitFor("NCCL init (rank 0 of 2)",
                      [&](std::string*) { return ++polls < 4 ? PollState::kPending : PollState::kDone; }, 1.0,
                      clock.Make(0.1));
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(polls, 4);
}

// The real clock: a pending operation ends, and not before its deadline.
// (How soon after is the fake clock's to test: a loaded host may be late.)
TEST(NcclGroupWaitFor, TheSteadyClockTimesOut) {
  const auto start = std::chrono::steady_clock::now();
  Status st = WaitFor("NCCL init (rank 1 of 2)", [](std::string*) { return PollState::kPending; }, 0.05);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(st.message(), "NCCL init (rank 1 of 2): timed out after 0.05 s");
  EXPECT_GE(took, 0.05);
}

TEST(NcclGroupDtype, TheFourReducedDtypesAndNothingElse) {
  EXPECT_EQ(NcclDataTypeFor(at::kFloat), ncclFloat32);
  EXPECT_EQ(NcclDataTypeFor(at::kBFloat16), ncclBfloat16);
  EXPECT_EQ(NcclDataTypeFor(at::kDouble), ncclFloat64);
  EXPECT_EQ(NcclDataTypeFor(at::kLong), ncclInt64);
  for (at::ScalarType other : {at::kInt, at::kHalf, at::kBool, at::kByte, at::kComplexFloat}) {
    EXPECT_EQ(NcclDataTypeFor(other), -1) << c10::toString(other);
  }
}

// CPU tensors stand in for the checks that come before the device's.
TEST(NcclGroupChecks, NamesTheTensorAndWhatIsWrong) {
  EXPECT_TRUE(CheckAllReduceTensors({}, 0).ok());
  Status st = CheckAllReduceTensors({at::zeros({4}, at::kFloat)}, 0);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "NCCL all-reduce: tensor 0 is on cpu, not a CUDA device");
  // The dtype is checked first: the only check a CPU tensor can fail alone here.
  st = CheckAllReduceTensors({at::zeros({4}, at::kInt)}, 0);
  EXPECT_EQ(st.message(), "NCCL all-reduce: tensor 0 has dtype Int; NCCL sums Float, BFloat16, Double and Long here");
  st = CheckAllReduceTensors({at::Tensor()}, 0);
  EXPECT_EQ(st.message(), "NCCL all-reduce: tensor 0 is undefined");
}

TEST(NcclGroupChecks, OnlySurvivorsAndRanksOfTheGroup) {
  EXPECT_TRUE(CheckShrinkExcluded({3, 1}, 0, 4).ok());
  EXPECT_EQ(CheckShrinkExcluded({4}, 0, 4).message(), "NCCL shrink: excluded rank 4 is not in a group of 4");
  EXPECT_EQ(CheckShrinkExcluded({2}, 2, 4).message(),
            "NCCL shrink: excluded rank 2 is this rank; only the survivors shrink");
  EXPECT_EQ(CheckShrinkExcluded({1, 1}, 0, 4).message(), "NCCL shrink: an excluded rank is named twice");
  EXPECT_EQ(CheckShrinkExcluded({-1}, 0, 4).code(), Status::Code::kInvalidArgument);
}

TEST(NcclGroupErrors, APeerLostIsUnavailableAndOneLine) {
  Status st = NcclError("NCCL all-reduce", "ncclCommGetAsyncError", ncclRemoteError, "socket closed\nby peer\n");
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_EQ(st.message(), std::string("NCCL all-reduce: peer lost (remote error): ncclCommGetAsyncError: ") +
                              ncclGetErrorString(ncclRemoteError) + "; socket closed by peer");
  st = NcclError("NCCL all-reduce", "ncclGroupEnd", ncclSystemError);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_NE(st.message().find("peer lost or network down (system error): ncclGroupEnd: "), std::string::npos);
  EXPECT_EQ(NcclError("NCCL init", "x", ncclUnhandledCudaError).code(), Status::Code::kUnavailable);
}

TEST(NcclGroupErrors, MisuseKeepsItsCode) {
  EXPECT_EQ(NcclError("NCCL all-reduce", "ncclAllReduce", ncclInvalidArgument).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(NcclError("NCCL all-reduce", "ncclAllReduce", ncclInvalidUsage).code(), Status::Code::kInternal);
  EXPECT_EQ(NcclError("NCCL init", "ncclCommInitRankConfig", ncclInternalError).message(),
            std::string("NCCL init: ncclCommInitRankConfig: ") + ncclGetErrorString(ncclInternalError));
}

TEST(NcclGroup, BadArgumentsAreRefusedBeforeAnyCudaCall) {
  int exchanges = 0;
  const NcclGroup::ExchangeId exchange = [&](const std::string& mine) -> Result<std::string> {
    ++exchanges;
    return mine;
  };
  EXPECT_EQ(NcclGroup::Create(2, 2, 0, exchange, 5).status().message(), "NCCL init: rank 2 of 2 is out of range");
  EXPECT_EQ(NcclGroup::Create(0, 2, -1, exchange, 5).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(NcclGroup::Create(0, 2, 0, exchange, 0).status().message(), "NCCL init: the timeout must be positive");
  EXPECT_EQ(exchanges, 0);
}

// Without a GPU (this CPU host, CI), Create is one line naming what the CUDA
// runtime said, before any peer is involved. With one, a world of one forms,
// refuses CPU tensors, and after Abort fails fast.
TEST(NcclGroup, CreateSaysWhyThereIsNoGpuOrFormsAWorldOfOne) {
  int exchanges = 0;
  const NcclGroup::ExchangeId exchange = [&](const std::string& mine) -> Result<std::string> {
    ++exchanges;
    return mine;
  };
  const auto start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<NcclGroup>> group = NcclGroup::Create(0, 1, 0, exchange, 30);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(exchanges, 0);
  Result<int> gpus = VisibleCudaDevices();
  std::printf("VisibleCudaDevices: %s; Create took %.3f s: %s\n",
              gpus.ok() ? std::to_string(*gpus).c_str() : gpus.status().ToString().c_str(), took,
              group.ok() ? "a group" : group.status().ToString().c_str());
  if (!gpus.ok()) {
    ASSERT_FALSE(group.ok());
    EXPECT_EQ(group.status().code(), Status::Code::kFailedPrecondition);
    EXPECT_EQ(group.status().message().rfind("NCCL init: no CUDA device visible (cudaGetDeviceCount: ", 0), 0u)
        << group.status().message();
    EXPECT_EQ(group.status().message().find('\n'), std::string::npos);
    EXPECT_LT(took, 30.0);  // the error came before the deadline: nothing waited on a GPU
    // The same for a rank that would need its peers: it never reaches the exchange.
    EXPECT_EQ(NcclGroup::Create(1, 2, 0, exchange, 30).status().code(), Status::Code::kFailedPrecondition);
    EXPECT_EQ(exchanges, 0);
    return;
  }
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  NcclGroup& g = **group;
  EXPECT_EQ(g.rank(), 0);
  EXPECT_EQ(g.size(), 1);
  EXPECT_TRUE(g.usable());
  EXPECT_EQ(g.AllReduceSum({at::ones({4})}, nullptr).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(g.usable());
  g.Abort();
  EXPECT_FALSE(g.usable());
  EXPECT_EQ(g.AllReduceSum({}, nullptr).code(), Status::Code::kUnavailable);
}

}  // namespace
}  // namespace bulwark::trainer
