// Pacing the pushes of backups (ZeRO-1 jobs) around the ranks' collectives.
//
// Every image a rank seals is pushed to its backup peer during the next
// step, and on a host whose cores (or NIC) the ranks also use, a push that
// lands in the middle of their compute slows the step that every rank then
// waits for. The push worker therefore sends in chunks, and before each
// chunk it looks at the rank's phase word (client/shard_phase.h, set by the
// trainer around its all-reduce and all-gather): in `collective` mode it
// sends only while the rank waits in a collective. A deadline bounds the
// wait, after which it sends anyway, so no backup is skipped for pacing and
// the slot is back with the rank before it is reused (two steps later).
//
// BULWARK_SHARD_PACE (the agent's environment) picks the mode:
//   off         send at once (default)
//   collective  send while the rank is in a collective
//   compute     send while it is not (the network is idle then: for ranks
//               whose collectives and the push share one NIC)
// Off by default: on the 2-core dev host, collective pacing moved the push's
// cost out of the forward pass into the all-reduce (gloo over loopback is
// CPU-bound there too) without a throughput gain the host's noise would
// show, and it delays every backup by most of a step (docs/checkpoints.md,
// "Measured").
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "client/shard_phase.h"

namespace bulwark::agent {

enum class PaceMode { kOff, kCollective, kCompute };

inline PaceMode PaceModeFromEnv() {
  const char* v = std::getenv("BULWARK_SHARD_PACE");
  const std::string s = v == nullptr ? "" : v;
  if (s == "collective") return PaceMode::kCollective;
  if (s == "compute") return PaceMode::kCompute;
  return PaceMode::kOff;
}

// The deadline is this fraction of the rank's step interval after the image
// was sealed. The image of step s is sealed early in step s+1, whose
// all-reduce and all-gather come at its end (about 0.75 to 0.95 intervals
// after the seal on the dev host). The backup of s must be with the peer
// before step s+1 completes, or a machine lost early in step s+2 would cost
// two steps instead of one; 0.9 leaves the rest of the image time to go out
// after the deadline. The slot is back with the rank long before it reuses
// it at 2 intervals.
constexpr double kPaceFraction = 0.9;
// A paced push never waits longer than this in all: the receiving agent
// gives up on a stream without progress after kTransferTimeoutS (10 s).
constexpr std::chrono::milliseconds kPaceMaxWait{4000};
// Chunks small enough to fit several into one all-reduce of the small model
// (tens of ms) and large enough that the checks between them cost nothing.
constexpr size_t kPaceChunk = 1 << 20;

using PaceClock = std::chrono::steady_clock;

struct Pace {
  PaceMode mode = PaceMode::kOff;
  uint32_t* word = nullptr;  // the rank's phase word; nullptr: not paced
  PaceClock::time_point deadline{};
  double waited_ms = 0;
  bool late = false;  // the deadline passed before the push was done

  // Blocks until the next chunk may go.
  void Wait() {
    if (mode == PaceMode::kOff || word == nullptr) return;
    const auto t0 = PaceClock::now();
    for (;;) {
      const uint32_t p = client::LoadPhase(word);
      if (p == client::kPhaseUnknown) break;
      const bool go = mode == PaceMode::kCollective ? p == client::kPhaseCommunicating : p == client::kPhaseComputing;
      if (go) break;
      const auto now = PaceClock::now();
      if (now >= deadline) {
        late = true;
        break;
      }
      client::WaitWhilePhase(word, p, deadline - now);
    }
    waited_ms += std::chrono::duration<double, std::milli>(PaceClock::now() - t0).count();
  }
};

// A rank's step interval, from the times its images are sealed.
struct StepClock {
  PaceClock::time_point last{};
  double interval_ms = 0;  // moving average; 0 until two images were seen
  // Notes a seal; returns when its push must be done by, or the epoch when
  // the interval is not known yet (the push is not paced).
  PaceClock::time_point Sealed(PaceClock::time_point now) {
    if (last != PaceClock::time_point{}) {
      const double gap = std::chrono::duration<double, std::milli>(now - last).count();
      // A gap of minutes is a restart or a pause, not a step.
      if (gap < 60000) interval_ms = interval_ms > 0 ? 0.8 * interval_ms + 0.2 * gap : gap;
    }
    last = now;
    if (interval_ms <= 0) return {};
    const auto wait = std::chrono::milliseconds(static_cast<int64_t>(kPaceFraction * interval_ms));
    return now + std::min<PaceClock::duration>(wait, kPaceMaxWait);
  }
};

}  // namespace bulwark::agent
