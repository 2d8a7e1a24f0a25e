// The rank link: what a training rank tells its agent about every step, and
// the agent's test hooks back. A Unix SOCK_SEQPACKET socket (the agent's
// DIR/machines/M/ranks.sock, named by BULWARK_RANK_SOCKET), separate from the
// checkpoint link so that any trainer can speak it without checkpoints.
//
//   rank -> agent                                agent -> rank
//   HELLO <rank> <pid>                           INJECT nan | loss-spike |
//   STEP <step signal, see StepSignal::Format>          hang-collective | hang-compute |
//                                                       yield (stop between steps, WAIT) |
//                                                       abort (end the generation now, even
//                                                       inside a collective: TakeAbort)
//   PHASE <what> <expected_ms> <step>            (the step it follows)
//   LOST <step>     a collective failed; waiting  ASSIGN <see RankAssignment>
//   WAIT <step>     a step held back; waiting
//   READY           a pre-spawned process, set up and waiting (HELLO -1)
//   INPLACE         this program can wait for an ASSIGN (LOST/WAIT/READY);
//                   the agent pre-spawns spares only for such a job
//   SPLICE          this generation can grow between  SPLICE <as ASSIGN> (the next generation,
//                   steps (an elastic ring from plans)         sent while this one trains)
//
// LOST, WAIT and READY say the process waits for an ASSIGN: the next
// generation's rank and rendezvous, which it joins in place (no new process,
// no libtorch load, no model build). The agent answers with ASSIGN or kills
// it (docs/recovery.md).
//
// Step and phase reports never block: a full socket drops the report rather
// than slow the step (the next one says as much); the waits' messages do. Not thread-safe; the training loop owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "common/step_signal.h"

namespace bulwark::rank_client {

constexpr const char* kRankSocketEnv = "BULWARK_RANK_SOCKET";
// Where the agent puts the policy's spike factor for the rank's own guard.
constexpr const char* kSpikeFactorEnv = "BULWARK_SPIKE_FACTOR";
// The whole spike rule, "factor,window,min_history" (common/spike_rule.h):
// the trainer holds back a step by the controller's own thresholds.
constexpr const char* kSpikeRuleEnv = "BULWARK_SPIKE_RULE";
// A step the controller accepts as it is (a spike that a replay reproduced).
constexpr const char* kAcceptStepEnv = "BULWARK_ACCEPT_ANOMALY_STEP";

// One completed (or held-back) step as the rank saw it: the figures
// (common/step_signal.h) and when. Tokens go as an optional 14th word, so
// 13-word reports still parse.
struct StepSignal : StepFigures {
  int64_t observed_ms = 0;  // wall clock, ms since the epoch

  // "STEP 12 1 3.41 0.82 0.80 95.1 80.2 12.3 0 0 - 1763840000000 [16384 [79.6]]":
  // the last two, tokens and device_ms, optional (tokens 0 before a device_ms).
  std::string Format() const;
  static Result<StepSignal> Parse(const std::string& line);
  bool anomalous() const { return local_nonfinite || nonfinite || !halted.empty(); }
  // Step `step`, held back by the rank's anomaly guard (`why`: "nan" or
  // "spike"), observed now; the caller adds what it knows locally.
  static StepSignal Halted(int64_t step, double loss, double grad_norm, const std::string& why);
};

// The ring address of the rank's slot ("addr:port", fixed for the agent's
// life) and the generation's ring plan (common/ring_layout.h's
// EncodeRingPlan): with both, an elastic rank forms its ring from the plan
// alone, with no rendezvous store (docs/recovery.md).
constexpr const char* kRingAddrEnv = "BULWARK_RING_ADDR";
constexpr const char* kRingPlanEnv = "BULWARK_RING_PLAN";

// A rank of a new generation handed to a process that is already running:
// a survivor of the previous generation, or a pre-spawned one.
// "ASSIGN <generation> <rank> <local_rank> <world> <local_world> <master_addr>
//  <master_port> <backup_of or -1> <log path> [<ring addr> <ring plan>]"
// ('-' for a ring address or plan the agent has none of).
struct RankAssignment {
  int64_t generation = 0;
  int rank = 0, local_rank = 0, world_size = 1, local_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int backup_of = -1;
  std::string log_path;
  std::string ring_addr, ring_plan;  // "": none

  // "ASSIGN ...", or with `verb` "SPLICE" the same words sent while the
  // process trains (a grow spliced in between steps, docs/recovery.md).
  std::string Format(const std::string& verb = "ASSIGN") const;
  static Result<RankAssignment> Parse(const std::string& line);
};

// Set (to 1) in a process the agent starts ahead of need: it sets itself up,
// says READY and waits for its ASSIGN.
constexpr const char* kPrespawnEnv = "BULWARK_PRESPAWN";

class RankLink {
 public:
  // Connects to the agent named by BULWARK_RANK_SOCKET; nullptr when the
  // variable is unset (a rank run by hand). A variable that names no live
  // socket is an error: the agent that set it must be listening.
  static Result<std::unique_ptr<RankLink>> FromEnv(int rank);
  ~RankLink();

  void Step(const StepSignal& s);
  // A phase that is not a step (an evaluation, a disk checkpoint) begins
  // after step `after_step` and should take about `expected_ms`.
  void Phase(const std::string& what, double expected_ms, int64_t after_step);
  // The agent's next injection request, without waiting: "nan",
  // "loss-spike", "hang-collective", "hang-compute", or nullopt.
  std::optional<std::string> PollInject();
  // The socket, for a wait that must also hear the agent (a ring
  // collective: trainer/comm/ring.h).
  int fd() const { return sock_; }
  // Reads what the agent sent, without waiting: true when it asked this
  // rank to abort its generation. Other injections are kept, in order, for
  // PollInject. A collective whose peer hangs (a frozen machine) hears
  // neither data nor EOF; only the agent can tell it the generation is over.
  bool TakeAbort();
  // This process now is `rank` (after an ASSIGN): the agent's view of the
  // link follows, and the hang detector hears a new start.
  void Hello(int rank);
  // Says INPLACE (see the top of this file).
  void OfferInPlace();
  // Says SPLICE: an elastic data-parallel rank whose generation formed from
  // the controller's plans can take a grow between steps, without yielding.
  void OfferSplice();
  // The next generation the agent sent while this one trains (SPLICE, read
  // by PollInject and TakeAbort), if any; taking it clears it.
  const std::optional<RankAssignment>& splice() const { return splice_; }
  std::optional<RankAssignment> TakeSplice();
  // "LOST", "WAIT" or "READY" (see the top of this file), then waits up to
  // `timeout_ms` (-1: forever) for the agent's ASSIGN. nullopt when the time
  // ran out or the agent closed the link.
  std::optional<RankAssignment> AwaitAssignment(const std::string& why, int64_t step, int timeout_ms);
  // Waits up to `timeout_ms` for the agent to end the link (it restarts the
  // ranks, which ends this process first); false when the time ran out.
  bool WaitClosed(int timeout_ms);

 private:
  RankLink() = default;
  // One injection the agent sent, without waiting; a SPLICE read on the way
  // goes to splice_.
  std::optional<std::string> ReadInject();
  int sock_ = -1;
  std::deque<std::string> held_;  // injections TakeAbort read, for PollInject
  std::optional<RankAssignment> splice_;
};

}  // namespace bulwark::rank_client
