// The signature table: the shipped one and the copy compiled into the
// agent, what it names, user extensions; and its limits, found by fuzzing
// (fuzz/signatures_fuzz.cc):
// libstdc++'s regex recursed along the line and along the pattern, so a long
// log line or a deeply nested extension crashed the agent.
#include <gtest/gtest.h>

#include <string>

#include "agent/signatures.h"

namespace bulwark::agent {
namespace {

// The shipped table, config/signatures.tsv, as the source tree has it.
SignatureTable Shipped() {
  auto t = SignatureTable::Load(BULWARK_SIGNATURES_FILE);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return *t;
}

TEST(Signatures, TheBuiltInTableIsTheShippedFile) {
  // The agent uses the compiled-in copy, so an installed or copied binary
  // needs no source tree; it must say what config/signatures.tsv says.
  auto builtin = SignatureTable::Builtin();
  ASSERT_TRUE(builtin.ok()) << builtin.status().ToString();
  EXPECT_EQ(builtin->size(), Shipped().size());
  EXPECT_EQ(builtin->Match({"NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."}), "xid");
}

TEST(Signatures, ShippedTableClassifiesCommonDeaths) {
  const SignatureTable t = Shipped();
  EXPECT_EQ(t.Match({"RuntimeError: CUDA error: an illegal memory access was encountered"}), "cuda_error");
  EXPECT_EQ(t.Match({"NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."}), "xid");
  EXPECT_EQ(t.Match({"kernel: uncorrectable ECC error detected"}), "ecc");
  EXPECT_EQ(t.Match({"torch.OutOfMemoryError: CUDA out of memory."}), "oom");
  EXPECT_EQ(t.Match({"terminate called after throwing an instance of 'std::bad_alloc'"}), "oom");
  EXPECT_EQ(t.Match({"[pair.cc:589] Read error: Connection reset by peer"}), "connection_reset");
  EXPECT_EQ(t.Match({"Segmentation fault (core dumped)"}), "segfault");
  // PyTorch 1.13's store on a MASTER_PORT another process holds, then its
  // traceback: the port, not the program (issue 39's flake, verbatim).
  EXPECT_EQ(t.Match({"W20261127 08:09:30.278566 21043 socket.cpp:426] [c10d] The server socket has failed to bind to "
                     "[::]:29709 (errno: 98 - Address already in use).",
                     "Traceback (most recent call last):",
                     "RuntimeError: The server socket has failed to listen on any local network address."}),
            "port_in_use");
  // Newer PyTorch says it in one line.
  EXPECT_EQ(t.Match({"torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                     "network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE"}),
            "port_in_use");
  EXPECT_EQ(t.Match({"Traceback (most recent call last):", "ValueError: bad"}), "exception");
  // The job's own code: the policy stops the job instead of evicting a machine.
  EXPECT_EQ(t.Match({"Traceback (most recent call last):", "ModuleNotFoundError: No module named 'torch'"}), "import_error");
  EXPECT_EQ(t.Match({"  File \"train.py\", line 3", "SyntaxError: invalid syntax"}), "syntax_error");
  EXPECT_EQ(t.Match({"bash: line 1: bulwark-trian: command not found"}), "command_not_found");
  EXPECT_EQ(t.Match({"{\"event\":\"step\",\"step\":3}", "all good"}), "");
}

// Issue 58: when one rank dies, every survivor's NCCL says "remote process
// exited or there was a network error"; classified nccl_hardware, it evicted
// each survivor's machine. A survivor lost a peer; the culprit is still named
// by its own fault, whatever its tail says after it.
TEST(Signatures, ANcclSurvivorLostAPeerAndTheCulpritKeepsItsOwnFault) {
  const SignatureTable t = Shipped();
  // A survivor's exception under torch 2.x (ProcessGroupNCCL), over sockets.
  const std::vector<std::string> survivor = {
      "[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
      "ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error, NCCL version 2.30.7",
      "[rank1]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
      "prematurely.",
      "[rank1]: Last error:", "[rank1]: socketProgress: Connection closed by remote peer 10.0.0.2<41568>"};
  EXPECT_EQ(t.Match(survivor), "connection_reset");
  // Over InfiniBand with NCCL_DEBUG=WARN: the send to the dead peer's QP fails.
  EXPECT_EQ(t.Match({"m02:4121:4190 [0] transport/net_ib.cc:2273 NCCL WARN NET/IB: Got completion from peer "
                     "10.0.0.2<51234> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 "
                     "hca mlx5_0",
                     "NCCL Last Error: remote process exited or there was a network error"}),
            "connection_reset");
  // Gloo's survivors under torch 2.15, verbatim: a killed peer, a frozen one.
  EXPECT_EQ(t.Match({"[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] "
                     "Read error [127.0.0.1]:33203: Connection reset by peer. This is typically caused by a remote "
                     "worker hanging or bugs in the application."}),
            "connection_reset");
  EXPECT_EQ(t.Match({"[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
                     "unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to complete"}),
            "connection_reset");

  // The culprits, as before: its own InfiniBand device or system call...
  EXPECT_EQ(t.Match({"m01:77:90 [0] NCCL WARN NET/IB : mlx5_0:1 async fatal event: local catastrophic error",
                     "NCCL error in: ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error"}),
            "nccl_hardware");
  EXPECT_EQ(t.Match({"m01:77:90 [0] NCCL WARN NET/IB : Unable to open device mlx5_1"}), "nccl_hardware");
  EXPECT_EQ(t.Match({"m01:77:90 [0] NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory"}),
            "nccl_hardware");
  EXPECT_EQ(t.Match({"torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled "
                     "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.30.7",
                     "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device "
                     "error."}),
            "nccl_hardware");
  EXPECT_EQ(t.Match({"m01:77:90 [0] NCCL WARN NET/IB : mlx5_0:1 Got non-fatal async event: port error(10)"}),
            "nccl_hardware");
  // ...its GPU, even when its peers' aborts reach it afterwards...
  EXPECT_EQ(t.Match({"RuntimeError: CUDA error: an illegal memory access was encountered",
                     "NCCL error in: ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error",
                     "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting"}),
            "cuda_error");
  // ...and NCCL's internal errors, which say nothing of the machine.
  EXPECT_EQ(t.Match({"NCCL error in: ProcessGroupNCCL.cpp:3356, internal error - please report this issue to the "
                     "NCCL developers, NCCL version 2.30.7",
                     "ncclInternalError: Internal check failed."}),
            "nccl");
}

TEST(Signatures, UserLinesComeBeforeShippedOnes) {
  SignatureTable t = Shipped();
  auto user = SignatureTable::Parse("# mine\nmy_flaky_fs\tStale file handle\nnccl_hardware\tConnection reset\n", "u.tsv");
  ASSERT_TRUE(user.ok()) << user.status().ToString();
  t.Prepend(*user);
  EXPECT_EQ(t.Match({"open: Stale file handle"}), "my_flaky_fs");
  EXPECT_EQ(t.Match({"Connection reset by peer"}), "nccl_hardware");
}

TEST(Signatures, MalformedLineNamesFileAndLine) {
  auto t = SignatureTable::Parse("ok\tfine\nno tab here\n", "sigs.tsv");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("sigs.tsv:2"), std::string::npos) << t.status().message();
  auto bad = SignatureTable::Parse("x\t(unclosed\n", "sigs.tsv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad regex"), std::string::npos) << bad.status().message();
}


TEST(Signatures, AVeryLongLogLineIsMatchedWithoutOverflowingTheStack) {
  // The shipped nccl_network pattern; a rank that printed a 1 MB line before
  // it died used to take the agent down with it.
  auto t = SignatureTable::Parse(
      "nccl_network\tNCCL error.*(unhandled system error|remote process exited)\n", "test.tsv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::string filler(1 << 20, 'x');
  EXPECT_EQ(t->Match({"NCCL error " + filler}), "");
  // Error text at either end of a long line is still found.
  EXPECT_EQ(t->Match({"NCCL error: unhandled system error " + filler}), "nccl_network");
  EXPECT_EQ(t->Match({filler + " NCCL error: remote process exited"}), "nccl_network");
}

TEST(Signatures, PatternsTooDeepOrTooLongAreRefusedNamingTheLine) {
  auto deep = SignatureTable::Parse("ok\tfine\nx\t" + std::string(9, '(') + "a" + std::string(9, ')') + "\n", "t.tsv");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(deep.status().message().find("t.tsv:2: signature 'x'"), std::string::npos) << deep.status().message();
  EXPECT_FALSE(SignatureTable::Parse("x\t" + std::string(600, 'a') + "\n", "t.tsv").ok());
  // Escaped parentheses are literals, not groups.
  EXPECT_TRUE(SignatureTable::Parse("x\t\\(\\(\\(\\(\\(\\(\\(\\(\\(a\n", "t.tsv").ok());
  EXPECT_TRUE(SignatureTable::Parse("x\t(((a)))\n", "t.tsv").ok());
}

TEST(Signatures, BacktrackingPatternsFinishQuickly) {
  // Exponential under backtracking; polynomial in the NFA mode used.
  std::string re;
  for (int i = 0; i < 20; ++i) re += ".*";
  auto t = SignatureTable::Parse("x\t" + re + "z\n", "t.tsv");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Match({std::string(64, 'a')}), "");
}

// Issue 40: the address a rank could not connect to names the machine at fault.
TEST(UnreachablePeer, ReadsTheAddressARankCouldNotConnectTo) {
  EXPECT_EQ(UnreachablePeer({"step 3 loss 2.1",
                             "bulwark-train: error: connecting to ring peer 127.0.0.1:58237 failed: Connection refused"}),
            "127.0.0.1:58237");
  EXPECT_EQ(UnreachablePeer({"error: connecting to ring peer 10.213.7.4:41000: No route to host"}), "10.213.7.4:41000");
  // Gloo (a PyTorch DDP job) and PyTorch's TCPStore.
  EXPECT_EQ(UnreachablePeer({"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
                             "[10.0.0.7]:61527: Connection refused"}),
            "10.0.0.7:61527");
  EXPECT_EQ(UnreachablePeer({"torch.distributed.DistNetworkError: The client socket has failed to connect to "
                             "[10.0.0.2]:29500 (errno: 111 - Connection refused)."}),
            "10.0.0.2:29500");
  // The last one named wins: it is what the rank died of.
  EXPECT_EQ(UnreachablePeer({"connecting to ring peer 1.2.3.4:5 failed: x", "connecting to ring peer 6.7.8.9:10 failed: y"}),
            "6.7.8.9:10");
}

TEST(UnreachablePeer, NamesNoOneWithoutAFailedConnect) {
  EXPECT_EQ(UnreachablePeer({}), "");
  EXPECT_EQ(UnreachablePeer({"Connection reset by peer"}), "");
  // A link that never came names no one: either side may be unreachable.
  EXPECT_EQ(UnreachablePeer({"no link from ring peer 10.0.0.3:4000 within 30 s"}), "");
  EXPECT_EQ(UnreachablePeer({"connecting to ring peer garbage failed"}), "");
  EXPECT_EQ(UnreachablePeer({"connecting to ring peer host:notaport failed"}), "");
  EXPECT_EQ(UnreachablePeer({std::string(200000, 'x') + "connecting to ring peer"}), "");
}

// Issue 36: a peer that closed or reset its end is named; one that was never
// reached, or went silent, is not.
TEST(ClosedPeer, ReadsTheAddressWhoseEndClosed) {
  EXPECT_EQ(ClosedPeer({"bulwark-train: rank 1: all-reduce failed on rank 1 (a peer died, hung or was cut off): "
                        "[./gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.213.109.4]:18579; waiting"}),
            "10.213.109.4:18579");
  EXPECT_EQ(ClosedPeer({"[./gloo/transport/tcp/pair.cc:589] Read error [10.213.106.2]:64431: Connection reset by peer; "
                        "waiting for the next generation"}),
            "10.213.106.2:64431");
  EXPECT_EQ(ClosedPeer({"[pair.cc:580] Write error [10.0.0.7]:61527: Broken pipe"}), "10.0.0.7:61527");
  EXPECT_EQ(ClosedPeer({"connect [10.0.0.7]:61527: Connection refused", "Timed out waiting 10000ms for recv"}), "");
}

}  // namespace
}  // namespace bulwark::agent
