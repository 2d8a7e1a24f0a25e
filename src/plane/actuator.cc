#include "plane/actuator.h"

#include <algorithm>
#include <cstdlib>

#include "common/ring_layout.h"

namespace bulwark::plane {
namespace {

wire::Command Stop(const std::string& id, const std::string& reason) {
  wire::Command c;
  c.set_kind(wire::Command::STOP_RANKS);
  c.set_id(id);
  c.set_reason(reason);
  return c;
}

}  // namespace

wire::Command WarmStandby(const JobLaunch& launch, const Placement& placement, double spike_factor) {
  wire::Command c = Stop("warm/" + launch.spec.id, "standby, warm for job " + launch.spec.id);
  c.set_world_size(placement.world_size());
  c.set_local_world_size(placement.ranks_per_machine);
  c.set_elastic(launch.spec.elastic());
  for (const std::string& a : launch.argv) c.add_argv(a);
  for (const auto& [k, v] : launch.env) (*c.mutable_env())[k] = v;
  // As a START_RANKS carries it: part of what the spare runs with.
  c.set_spike_factor(spike_factor);
  return c;
}

void AddRingPlans(std::vector<MachineCommand>& commands, const JobLaunch& launch, const Placement& placement,
                  const std::map<MachineId, std::string>& ring_addrs) {
  const int L = placement.ranks_per_machine, W = placement.world_size(), pp = std::max(1, launch.spec.pp);
  // A pipeline's rank has two slots, so a machine then holds half as many.
  if (!launch.spec.elastic() || L > (pp > 1 ? kRingSlotPorts / 2 : kRingSlotPorts) || W % pp != 0) return;
  std::vector<std::string> slots;  // each slot's machine's ring_addr
  for (const MachineId& m : placement.slots) {
    auto it = ring_addrs.find(m);
    if (it == ring_addrs.end() || RingSlotAddress(it->second, 0, 0).empty()) return;
    slots.push_back(it->second);
  }
  const auto address = [&](int rank, int ring) { return RingSlotAddress(slots[rank / L], rank % L, ring); };
  const uint64_t nonce = RingNonce(launch.spec.id, placement.generation);
  const int D = W / pp;  // replicas: stage s holds ranks [s D, (s + 1) D) (trainer/step/pipeline_plan.h)
  // One rank a replica: the placement's layout, kept across narrowings
  // (reconcile.cc's NextRing), each rank sent its view of it.
  std::vector<RankRing> views;
  if (pp == 1) views = ViewsOf(placement.ring.world() == W ? placement.ring : RingLayout::Default(W, 0));
  for (MachineCommand& mc : commands) {
    if (mc.command.kind() != wire::Command::START_RANKS) continue;
    for (wire::RankLaunch& r : *mc.command.mutable_ranks()) {
      const int rank = r.rank();
      if (pp == 1) {
        if (rank < 0 || rank >= W) continue;
        r.set_ring_plan(EncodeRingPlan(PlanFor(rank, views[rank], W, nonce, [&](int x) { return address(x, 0); })));
        continue;
      }
      RingPlan world = PlanFor(rank, W, /*group=*/0, nonce, [&](int x) { return address(x, 0); });
      // Its pipeline neighbours (the previous and next stage of its
      // replica) send it activations and gradients over the world ring.
      for (int x : {rank - D, rank + D}) {
        if (x >= 0 && x < W) world.identities[x] = address(x, 0);
      }
      const int stage = rank / D;
      const RingPlan ring = PlanFor(rank % D, D, /*group=*/0, nonce, [&](int d) { return address(stage * D + d, 1); });
      r.set_ring_plan(EncodeRingPlan(world) + "|" + EncodeRingPlan(ring));
    }
  }
}

int MasterPort(const JobLaunch& launch, int64_t generation) {
  return launch.master_port_base + static_cast<int>(generation % 1000);
}

std::vector<MachineCommand> Actuate(const Action& action, const JobLaunch& launch,
                                    const Placement& current, const BackupPlan& routes) {
  std::vector<MachineCommand> out;
  switch (action.kind) {
    case ActionKind::kRestartAll: {
      const Placement& p = action.placement;
      for (size_t slot = 0; slot < p.slots.size(); ++slot) {
        wire::Command c;
        c.set_kind(wire::Command::START_RANKS);
        c.set_id(action.id);
        c.set_generation(p.generation);
        c.set_world_size(p.world_size());
        c.set_local_world_size(p.ranks_per_machine);
        c.set_elastic(launch.spec.elastic());
        c.set_master_addr(launch.master_addr);
        c.set_master_port(MasterPort(launch, p.generation));
        for (const std::string& a : launch.argv) c.add_argv(a);
        for (const auto& [k, v] : launch.env) (*c.mutable_env())[k] = v;
        c.set_reason(action.reason);
        for (int local = 0; local < p.ranks_per_machine; ++local) {
          wire::RankLaunch* r = c.add_ranks();
          r->set_rank(static_cast<int>(slot) * p.ranks_per_machine + local);
          r->set_local_rank(local);
        }
        c.set_durable_dir(launch.durable_dir);
        c.set_fresh_machines(action.fresh);
        c.set_rollback(action.rollback);
        c.set_restore_at_most(action.restore_at_most);
        c.set_persist_every(launch.persist_every);
        if (routes.slots.size() == p.slots.size() && routes.slots[slot].machine == p.slots[slot]) {
          const SlotRoute& route = routes.slots[slot];
          c.set_backup_machine(route.backup_machine);
          c.set_backup_addr(route.backup_addr);
          for (RankId r : route.backup_of) c.add_backup_of(r);
          // Fresh machines (requeue mode) fetch no copies: none survived.
          for (const RestoreSource& s : action.fresh ? std::vector<RestoreSource>{} : route.restore_from) {
            wire::ShardSource* src = c.add_restore_from();
            src->set_rank(s.rank);
            src->set_machine(s.machine);
            src->set_addr(s.addr);
            src->set_step(s.step);
          }
        }
        out.push_back({p.slots[slot], std::move(c)});
      }
      break;
    }
    case ActionKind::kEvict:
      out.push_back({action.machine, Stop(action.id, action.reason)});
      break;
    case ActionKind::kWaitForMachines:
    case ActionKind::kStopJob:
      // Survivors cannot progress without the full world: stop them rather
      // than let them hang in a collective until their timeout.
      for (const MachineId& m : current.slots) out.push_back({m, Stop(action.id, action.reason)});
      break;
    case ActionKind::kRequeue:
      // The baseline gives every machine back: the ranks stop, and so does
      // what the machines held in memory (START_RANKS.fresh_machines).
      for (const MachineId& m : current.slots) out.push_back({m, Stop(action.id, action.reason)});
      break;
    case ActionKind::kRunDiagnostics:
      // Stop-time diagnostics: the ranks stop while the machines test
      // themselves; the tests themselves are a one-shot the plane sends.
      for (const MachineId& m : current.slots) out.push_back({m, Stop(action.id, action.reason)});
      break;
    case ActionKind::kActivate:
    case ActionKind::kReplenishStandby:
    case ActionKind::kCaptureStacks:  // a one-shot request the plane sends itself
    case ActionKind::kStageRelease:   // likewise, beside the running ranks
    case ActionKind::kCheckup:        // a one-shot to the evicted machine (Plane::SendTestsLocked)
    case ActionKind::kAlignCheck:     // a one-shot beside the ranks (Plane::SendTestsLocked)
      break;
  }
  return out;
}

}  // namespace bulwark::plane
