// LivenessDetector: which silent machines are lost now. A machine's silence
// is the one fault no agent can report, so the controller decides it from
// when it last heard each agent (issue 62: the rules lived in the plane's
// tick, and the simulator modelled a loss as a fixed timeout, so none of
// them had run at 100k GPUs).
//
// The rules, each from an incident at scale (docs/control-plane.md):
// - The lease is learned: twice the 99th percentile of the gaps between
//   agents' reports heard over the last seconds (report_gaps.h), at least
//   heartbeat_timeout, at most reconnect_grace. A controller whose intake
//   lags widens every agent's gaps together, and its lease widens with them.
// - A machine not heard since this controller started (a restart, a
//   handover) is held to reconnect_grace, not the lease, and so is every
//   machine while a restarted controller's agents re-attach.
// - Closed peer: within its lease, a machine is lost after
//   closed_peer_timeout when a peer saw its connections close since it
//   last spoke: it is down, not cut off, and nothing of it can still run.
// - Domain skew: a switch takes its rack at once, but the rack's leases end
//   up to a report period apart. A machine with a failure domain whose lease
//   ended waits (kDomainSkew at most) for its domain's silent machines whose
//   leases are ending, and those of a domain are decided together.
// - Mass silence: more than kMassSilence (or 1% of the fleet) past their
//   leases at once says more about the controller than the machines: each is
//   lost only after reconnect_grace, and so is a straggler, silent since
//   before the latest mass silence, while that is recent.
// - At most kLostPerTick lost alone in one Check, the longest silent first
//   (each loss is a decision over every machine; dozens in one tick held the
//   plane's lock for seconds and cascaded, issue 36).
// - An evicted machine's silence says nothing, unless it is out for its
//   checkup (still in its rack, its loss counts toward its switch's burst).
//
// Pure: fed what was heard and `now`; the plane feeds it its agents' reports
// and acts on Check, and the simulator feeds it modelled heartbeats and acts
// on the same Check. Not thread-safe (the plane's lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "controller/cluster_state.h"
#include "controller/report_gaps.h"
#include "controller/time.h"

namespace bulwark::controller {

struct LivenessOptions {
  // The lease's floor: an agent that reports every 500 ms is lost after
  // four missed reports (PlaneOptions::heartbeat_timeout).
  Duration heartbeat_timeout = std::chrono::milliseconds(2000);
  // A silent machine whose peers saw its connections close is lost after
  // this much silence even within its lease.
  Duration closed_peer_timeout = std::chrono::milliseconds(2000);
  // A machine not heard since the controller started, and any machine of a
  // mass silence, is lost only after this much; the lease's ceiling.
  Duration reconnect_grace = std::chrono::milliseconds(10000);
};

class LivenessDetector {
 public:
  static constexpr size_t kLostPerTick = 4;
  static constexpr size_t kMassSilence = 16;
  static constexpr Duration kDomainSkew = std::chrono::milliseconds(1000);
  static constexpr int64_t kMinGapSamples = 50;  // fewer: too few to learn from

  explicit LivenessDetector(LivenessOptions o) : options_(o) {}
  const LivenessOptions& options() const { return options_; }

  // --- the machines ------------------------------------------------------
  // A machine to watch (idempotent): never heard (last heard at the epoch),
  // held to the reconnect grace, not lost.
  void Add(const MachineId& m);
  void Remove(const MachineId& m);
  // Its failure domain ("" none), as its registration says.
  void SetDomain(const MachineId& m, const std::string& domain);
  size_t size() const { return machines_.size(); }

  // --- what was heard ----------------------------------------------------
  // A report of `m`'s arrived `at` (counted at most `now`): one gap sample
  // of the lease, the time since its last, when it is held to the lease.
  // A lost machine is not heard until Back.
  void Heard(const MachineId& m, Time at, Time now);
  // Heard at `now` with no gap sample: a report of its is in the
  // controller's hands, and the wait is the controller's, not its pace.
  void HeardWaiting(const MachineId& m, Time now);
  // Its first word since it registered or since this controller started:
  // heard at `now`, held to the lease, not lost. True when it was lost.
  bool Back(const MachineId& m, Time now);
  // Last heard at `t` exactly (a restarted controller's machines, replayed:
  // a full grace from now); changes nothing else.
  void SetHeard(const MachineId& m, Time t);
  // Held to the reconnect grace until Back (a machine handed over to this
  // controller, not yet heard here).
  void AwaitBack(const MachineId& m);
  // The simulator's honest shortcut for a healthy machine: heard at every
  // Check's `now` (its reports keep coming) until Silent. A fleet of 12,500
  // reporting every 500 ms would otherwise be fed 25,000 reports a second;
  // their gap samples come through AddGaps instead.
  void HeardContinuously(const MachineId& m, Time now);
  // A continuously heard machine stops being heard; its last report was
  // `last` (at most now).
  void Silent(const MachineId& m, Time last);
  // `count` gap samples of `gap` at `now` (the simulator's modelled reports).
  void AddGaps(Time now, Duration gap, int64_t count) { gaps_.Add(now, gap, count); }

  // --- time that is nobody's silence -------------------------------------
  // The controller could not hear its agents for `d` (its own stall, a
  // large stack capture's flood): every machine's last word moves `d`
  // later, never past `now`.
  void Credit(Time now, Duration d);
  // While a restarted controller's agents re-attach: how many machines,
  // not lost, not evicted for good (in `state`), are not back yet; each
  // counts as heard at `since` (when the latest came back).
  size_t HoldForReattach(Time since, const ClusterState& state);
  // The re-attach is over: every lease starts afresh at `since`.
  void StartLeasesAt(Time since);

  // --- what is known -----------------------------------------------------
  bool Knows(const MachineId& m) const { return machines_.count(m) != 0; }
  bool Lost(const MachineId& m) const;
  // Held to the lease (heard since it registered or this controller
  // started), not the grace.
  bool OnLease(const MachineId& m) const;
  // When `m` was last heard (`now` for a continuously heard one); the epoch
  // for an unknown machine.
  Time LastHeard(const MachineId& m, Time now) const;
  // The 99th percentile of the gaps heard over the last seconds (zero when
  // too few), and the lease it makes.
  Duration GapP99(Time now) const { return gaps_.Quantile(now, 0.99, kMinGapSamples); }
  Duration Lease(Time now) const;

  // --- the decision ------------------------------------------------------
  struct Loss {
    MachineId machine;
    Time last_heard{};
    bool closed = false;  // within its lease: a peer saw its connections close
    Duration timeout{};   // the lease or grace it was held to
  };
  struct Verdict {
    // Lost alone, longest silent first: each is the caller's to mark with
    // Lose as it acts on it, in order (what it does for one sees the next
    // as not yet lost, as the plane always did).
    std::vector<Loss> alone;
    // Machines with a failure domain, decided together (already Lost).
    std::vector<Loss> with_domain;
    Duration lease{};
    // A mass silence now: how many were past their leases at once (0: none).
    size_t mass_silent = 0;
  };
  struct CheckInput {
    // Silence counts up to here (at most now): a large stack capture's
    // flood counts up to its start only.
    std::optional<Time> counted;
    // A restarted controller's agents are re-attaching: every machine is
    // held to the grace.
    bool reattaching = false;
    // The latest time a peer, itself not lost, was heard naming `m`'s
    // connections closed; asked only of a machine silent within its lease.
    std::function<std::optional<Time>(const MachineId& m)> closed_seen;
  };
  Verdict Check(Time now, const ClusterState& state, const CheckInput& in);
  // `m` is lost (a Verdict's `alone` loss, acted on): not heard until Back.
  void Lose(const MachineId& m);
  // Machines not lost and not heard continuously that `state` still watches
  // (known to it, not evicted for good): those a Check may yet lose. The
  // simulator checks only while there are some.
  size_t Watching(const ClusterState& state) const;

 private:
  struct Machine {
    Time last_heard{};
    bool lost = false;
    bool on_lease = false;    // heard since it registered or the controller started
    bool continuous = false;  // HeardContinuously, until Silent
    std::string domain;
    bool in_discrete = false;    // in discrete_
    bool in_continuous = false;  // counted in continuous_in_[domain]
  };
  // Whether `m` is heard discretely and not lost: what Check looks at.
  static bool Discrete(const Machine& m) { return !m.lost && !m.continuous; }
  // Keeps `discrete_` (and the domains' continuous counts) in step with
  // `m`'s flags after they changed.
  void Reindex(const MachineId& id, Machine& m);
  static bool Watched(const ClusterState& state, const MachineId& id);

  LivenessOptions options_;
  std::unordered_map<MachineId, Machine> machines_;
  // The discretely heard machines not lost, in id order (Check's order: its
  // ties and its batches are as the plane's agents, by id). Keys view the
  // ids in machines_, whose nodes do not move.
  std::map<std::string_view, Machine*> discrete_;
  // Domain -> how many of its machines, not lost, are heard continuously
  // (the domain skew's "silent 0 s" members, without a pass over them).
  std::unordered_map<std::string, size_t> continuous_in_;
  // The latest Check that found a mass silence.
  std::optional<Time> mass_silence_at_;
  ReportGaps gaps_;
};

}  // namespace bulwark::controller
