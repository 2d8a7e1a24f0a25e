// One generation of data-parallel training: restore, then the step loop.
//
// Train() (train.cc) sets up what outlives a generation once per process
// (data, model, parameter store) and runs generations in it: the first one,
// then one per ASSIGN from the agent after a peer was lost (docs/recovery.md).
// Everything that depends on the world (the communicator, the in-memory
// checkpoint's shard client, the optimizer's shard) is rebuilt per
// generation; the state itself is restored from the in-memory checkpoint as
// on a cold start, so a generation run in place and one run in a new
// process compute the same bits.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "rank_client/rank_link.h"
#include "common/status.h"
#include "trainer/optim/adamw.h"
#include "trainer/state/checkpoint.h"
#include "trainer/config.h"
#include "trainer/comm/dist.h"
#include "trainer/comm/ring.h"
#include "trainer/model/model.h"
#include "trainer/model/params.h"
#include "trainer/step/progress.h"
#include "trainer/data/sampler.h"
#include "trainer/diag/pace.h"
#include "trainer/diag/sdc.h"
#include "trainer/data/tokens.h"
#include "trainer/step/elastic_zero.h"

namespace bulwark::trainer {

// What one process keeps across generations.
struct TrainProcess {
  TrainConfig cfg;  // with the vocabulary and precision resolved
  std::string precision_reason;
  // --device resolved (device.h): parameters, optimizer state, batches and
  // the step live there; batches are built on the host and copied.
  torch::Device device{torch::kCPU};
  std::string device_reason;
  int gpus = 0;  // CUDA devices libtorch sees
  // --dist-backend, resolved at each rendezvous (device.h's ChooseNccl).
  std::string backend_reason;
  bool nccl = false;  // and whether it took NCCL: the world's reduction, or a pipeline stage's replicas
  int threads = 1;
  DataSet data;
  std::unique_ptr<Sampler> sampler;
  Transformer model{nullptr};
  // Built by the first generation (padded to its world size, which a job
  // keeps; the agent hands a process only a world of the size it had).
  std::unique_ptr<ParamStore> store;
  std::unique_ptr<AdamW> opt;
  int opt_rank = -1;  // the rank and width `opt` was built for (its ZeRO-1 shard)
  int opt_width = 0;
  // An elastic ZeRO-1 job's backup of its ring predecessor's part of the
  // moments, kept across generations (elastic_zero.h).
  ElasticZero zero;
  std::unique_ptr<rank_client::RankLink> link;  // nullptr: no agent
  // The emulated bad machine's corruption (sdc.h): it stays with the
  // process, and follows the machine's emulated hardware (sdc_file).
  std::optional<Sdc> sdc;
  std::optional<SdcFile> sdc_file;
  // The machine's emulated compute pace (pace.h), polled each step.
  std::optional<PaceFile> pace_file;
  // Set when this process must not run another generation in place.
  bool must_exit = false;
  // Elastic jobs (elastic.h): the state this process held when its last
  // generation ended, which the next generation keeps instead of restoring,
  // and the in-memory copies' timeline it was on.
  std::optional<TrainState> live;
  uint64_t live_timeline = 0;
  // An elastic job's ring links (ring.h), kept from one generation to the
  // next; nullptr: Gloo's mesh, formed anew each generation.
  std::unique_ptr<RingLinks> ring;
  // An elastic pipeline's second ring, among its stage's replicas.
  std::unique_ptr<RingLinks> stage_ring;
  // This generation's plan of the stage ring, when it was joined from plans.
  std::optional<RingPlan> stage_plan;
  // An elastic pipeline's stage (elastic_pipeline.h), which `store` holds;
  // -1 until the first generation.
  int stage = -1;
  // A grow spliced in between steps (docs/recovery.md): each elastic step's
  // reduction also carries the generation of the SPLICE this rank holds
  // (0: none), and gives back the lowest and highest any rank holds. When
  // every rank holds the same one, all of them move to it after the same
  // step: no yield, no wait for the agent, and no rank stops for a joiner
  // that is not ready (its ring neighbours' links say when it is).
  struct SpliceVote {
    int64_t mine = 0, low = 0, high = 0;
    bool Agreed() const { return low > 0 && low == high; }
  } vote;
};

// How a generation began, for its `start` event (the recovery breakdown).
struct GenerationStart {
  std::string path;  // "cold" (a new process), "prespawned" or "rejoin" (docs/recovery.md)
  TrainClock::time_point began, data_ready, rendezvous_done;
  double assign_wait_ms = 0;  // rejoin: from reporting the loss to the ASSIGN
  std::string rendezvous = "store";  // "plan": formed from the controller's ring plan, no store
  bool spliced = false;  // rejoin: the generation came while the last one trained (SpliceVote)
};

// How a generation ended when it did not fail outright.
enum class GenerationEnd {
  kFinished,  // trained to --steps, or --stop-at
  kHalted,    // a step held back for the controller (anomaly guard): wait for an ASSIGN
  kYielded,   // the agent asked for the ranks between steps (an elastic job grows): wait for an ASSIGN
  kSpliced,   // every rank holds the next generation (a grow, SpliceVote): it goes on there at once
};

// Fills idx and targets (B, T) with the samples at global positions
// [first, first + B) of the sampler's order.
void MakeBatch(const std::vector<uint16_t>& tokens, Sampler& sampler, uint64_t first, int B, int T,
               torch::Tensor& idx, torch::Tensor& targets);
// Validation batch `first / B`: samples [first, first + B) of the split in
// order, each T tokens from its start (no shuffling: every run evaluates the
// same samples).
void MakeValBatch(const std::vector<uint16_t>& val, uint64_t first, int B, int T, torch::Tensor& idx,
                  torch::Tensor& targets);
// A host batch on the rank's device (a CUDA rank); the CPU's is used as is.
torch::Tensor OnDevice(const torch::Tensor& t, const torch::Device& device);

// Runs one generation on `comm`. kUnavailable: a peer was lost (the caller
// may wait for the next generation in place).
Result<GenerationEnd> RunGeneration(TrainProcess& p, Comm& comm, const GenerationStart& g);

}  // namespace bulwark::trainer
