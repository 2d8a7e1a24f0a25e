// The scale simulator (src/sim): the real Controller on a simulated fleet.
// Fast: every run here is small or short.
#include <gtest/gtest.h>

#include <functional>

#include <cmath>

#include "sim/baselines.h"
#include "sim/sim.h"

namespace bulwark::sim {
namespace {

SimConfig Small() {
  SimConfig c;
  c.gpus = 512;  // 64 machines
  c.pp = 8;
  c.days = 30;
  c.rates.per_machine_day[static_cast<int>(FaultClass::kGpu)] *= 5;  // enough incidents in a month
  return c;
}

TEST(Sim, SameSeedGivesTheSameRun) {
  SimConfig c = Small();
  Result<SimResult> a = Simulate(c), b = Simulate(c);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(ToJson(c, *a, false).dump(), ToJson(c, *b, false).dump());
  EXPECT_GT(a->fleet.incident_count, 5);
  EXPECT_EQ(a->fleet.refused, 0) << a->fleet.first_refusal;

  c.seed = 2;
  Result<SimResult> other = Simulate(c);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(ToJson(c, *a, false)["arms"].dump(), ToJson(c, *other, false)["arms"].dump());
}

// Meta's closed form holds where its assumptions do: one failure class,
// restarts from the last durable checkpoint, a standby always there.
TEST(Sim, MatchesMetasClosedFormWithinOnePercent) {
  struct Point {
    int machines;
    double interval;
  };
  for (Point p : {Point{128, 3600}, Point{256, 1800}, Point{512, 900}}) {
    SimConfig c;
    c.recovery = SimConfig::Recovery::kWholeWorld;  // Meta's model restarts the world
    c.gpus = p.machines * 8;
    c.pp = 8;
    c.days = 365;
    c.rates.per_machine_day.fill(0);
    c.rates.per_machine_day[static_cast<int>(FaultClass::kGpu)] = 0.01;
    c.rates.manual_per_day = 0;
    c.oracle_standbys = true;
    c.costs.memory_checkpoints = false;
    c.costs.step = 1;
    c.costs.durable_interval = p.interval;
    Result<SimResult> r = Simulate(c);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const Costs& k = c.costs;
    // The first step after a restore redoes lost work: it is part of dt/2,
    // not of the restart overhead.
    // u0: detection + the priced restart up to the first step.
    const double u0 = k.detect_gpu + c.RestartSeconds() - k.step;
    const double expected = ClosedFormEttr(0.01 * p.machines / 86400.0, u0, p.interval, k.durable_write);
    const double simulated = r->arms[0].ettr_with_stalls;
    std::printf("closed form: %d machines, dt %.0f s: simulated %.5f, closed form %.5f\n", p.machines, p.interval, simulated, expected);
    EXPECT_NEAR(simulated / expected, 1.0, 0.01) << p.machines << " machines, dt " << p.interval << ": simulated "
                                                 << simulated << " closed form " << expected;
    // The baselines' model is Meta's too (torchelastic: a reschedule on top).
    EXPECT_LT(r->arms[2].ettr_with_stalls, simulated);
  }
}

// Events due at the same virtual time are handled in the order they were
// scheduled: two machines failing at the same step are evicted in script order.
TEST(Sim, EventsAtTheSameTimeKeepTheirOrder) {
  auto evictions = [](int first, int second) {
    SimConfig c = DemoReplay();
    c.script = {{20, FaultClass::kGpu, first}, {20, FaultClass::kGpu, second}};
    c.returned_classes.clear();
    c.record_events = true;
    Result<SimResult> r = Simulate(c);
    EXPECT_TRUE(r.ok());
    std::vector<std::string> exits;
    for (const std::string& line : r->fleet.event_log) {
      if (line.find("exited") != std::string::npos) exits.push_back(line);
    }
    return exits;
  };
  std::vector<std::string> ab = evictions(0, 1), ba = evictions(1, 0);
  ASSERT_EQ(ab.size(), 2u);
  ASSERT_EQ(ba.size(), 2u);
  EXPECT_NE(ab[0].find("m0000000"), std::string::npos) << ab[0];
  EXPECT_NE(ba[0].find("m0000001"), std::string::npos) << ba[0];
  EXPECT_EQ(ab[0].substr(0, ab[0].find(' ')), ab[1].substr(0, ab[1].find(' '))) << "same time";
}

// The simulator drives the policy, so changing the policy's config changes
// the outcome with no change to the simulator.
TEST(Sim, PolicyChangeShowsWithoutSimulatorChanges) {
  SimConfig c = Small();
  c.rates.per_machine_day[static_cast<int>(FaultClass::kNicFlap)] = 0.05;
  Result<SimResult> tolerant = Simulate(c);
  c.policy.network_alerts_to_evict = 1;  // evict on the first flap
  Result<SimResult> strict = Simulate(c);
  ASSERT_TRUE(tolerant.ok());
  ASSERT_TRUE(strict.ok());
  EXPECT_GT(strict->fleet.evicted, tolerant->fleet.evicted + 20);
  EXPECT_LT(strict->arms[0].ettr, tolerant->arms[0].ettr);
}

TEST(Sim, BadConfigIsOneLineNamingTheField) {
  struct Case {
    nlohmann::json j;
    std::string names;
  };
  for (const Case& k : {Case{{{"faults", {{"gpu", -1}}}}, "faults.gpu"},
                        Case{{{"gpus", 0}}, "gpus"},
                        Case{{{"faults", {{"cosmic_ray", 0.1}}}}, "unknown fault class"},
                        Case{{{"costs", {{"requeue", -5}}}}, "costs.requeue"},
                        Case{{{"costs", {{"tick_period", 0}}}}, "costs.tick_period: must be at least 0.001 seconds"},
                        Case{{{"policy", {{"hang_fudge", 1}}}}, "policy: unknown field 'hang_fudge'"},
                        Case{{{"elastic", true}, {"tp", 16}, {"pp", 1}}, "elastic: needs machines that each hold whole TP groups"},
                        Case{{{"rendezvous", "carrier-pigeon"}}, "rendezvous: 'carrier-pigeon' is not one of"}}) {
    Result<SimConfig> c = ConfigFromJson(k.j);
    ASSERT_FALSE(c.ok()) << k.j.dump();
    EXPECT_NE(c.status().message().find(k.names), std::string::npos) << c.status().message();
    EXPECT_EQ(c.status().message().find('\n'), std::string::npos);
  }
}

// The demo's schedule with locally measured costs lands near the demo's
// measured 80.1% (docs/simulator.md gives the margin and why).
TEST(Sim, DemoReplayLandsNearTheMeasuredEttr) {
  Result<SimResult> r = Simulate(DemoReplay());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->fleet.refused, 0) << r->fleet.first_refusal;
  EXPECT_FALSE(r->fleet.stopped) << r->fleet.stop_reason;
  EXPECT_EQ(r->fleet.incident_count, 8);
  std::printf("demo replay: simulated ETTR %.1f%% (measured 80.1%%)\n", 100 * r->arms[0].ettr);
  // 88.4% simulated (87.0% when the simulator modelled its detectors; the
  // real ones detect the hang in 2 s where the model took longer):
  // bench-recovery's tiny model restarts in ~1.9 s, the demo's small model
  // measured 2.5-4 s (docs/simulator.md).
  EXPECT_NEAR(r->arms[0].ettr, 0.801, 0.09);
}

}  // namespace
// Every threshold the policy's detectors use must change what happens in a
// simulation: the simulator drives the real detectors with modelled signals,
// so a threshold that stopped mattering means the simulator stopped running
// the code it claims to run. Each pair differs only in one threshold.
TEST(Sim, EveryDetectorThresholdMovesTheOutcome) {
  const double llama = 2048.0 * 54.0;
  nlohmann::json base = {{"gpus", 9600}, {"days", 20}, {"seed", 3}, {"compare_whole_world", false},
                         // More of the implicit faults than Llama 3 saw, so that 20 days hold several.
                         {"faults", {{"hang", 70 / llama}, {"sdc", 60 / llama}, {"fail_slow", 60 / llama}}}};
  struct Pair {
    const char* field;
    double normal, changed;
    // The outcome the threshold moves.
    std::function<double(const SimResult&)> outcome;
  };
  auto detection = [](const SimResult& r) {
    return r.arms[0].by_category[static_cast<int>(controller::TimeCategory::kDetection)];
  };
  auto incidents = [](const SimResult& r) { return static_cast<double>(r.fleet.incident_count); };
  auto slow_left = [](const SimResult& r) {
    return static_cast<double>(r.fleet.slow_undetected) * 1e6 + static_cast<double>(r.fleet.high_water);
  };
  const std::vector<Pair> pairs = {
      {"slow_ratio", 1.3, 4.0, slow_left},
      {"spike_factor", 5.0, 1.2, incidents},
      {"hang_factor", 5.0, 40.0, detection},
      {"anomaly_wait", 2.0, 60.0, detection},
  };
  for (const Pair& p : pairs) {
    nlohmann::json a = base, b = base;
    a["policy"] = {{p.field, p.normal}};
    b["policy"] = {{p.field, p.changed}};
    Result<SimConfig> ca = ConfigFromJson(a), cb = ConfigFromJson(b);
    ASSERT_TRUE(ca.ok() && cb.ok()) << p.field;
    Result<SimResult> ra = Simulate(*ca), rb = Simulate(*cb);
    ASSERT_TRUE(ra.ok() && rb.ok()) << p.field;
    std::printf("%-14s %6.2f -> %6.2f: outcome %.1f -> %.1f, ETTR %.3f%% -> %.3f%%\n", p.field, p.normal, p.changed,
                p.outcome(*ra), p.outcome(*rb), 100 * ra->arms[0].ettr, 100 * rb->arms[0].ettr);
    EXPECT_NE(p.outcome(*ra), p.outcome(*rb)) << p.field << " no longer changes the simulated outcome";
  }
}

// A bug in the job's own code at step 100, on every start: stopped within a
// bounded number of attempts, nothing evicted, at 9,600 and 100,000 GPUs.
TEST(Sim, AJobThatFailsAtTheSameStepEveryStartIsStoppedWithNoMachineEvicted) {
  for (int gpus : {9600, 100000}) {
    // PP 10 at 100,000 GPUs, as `bulwark sim --gpus 100000` fits it.
    // The store-less rendezvous (not built): through the store as built a
    // restart at 100k GPUs takes 12.7 h, longer than the policy's
    // crash_window (10 min), and the crash-loop guard never sees two of the
    // job's failures inside one window (docs/simulator.md).
    nlohmann::json j = {{"gpus", gpus}, {"pp", gpus == 100000 ? 10 : 16}, {"days", 1}, {"bug_step", 100},
                        {"bug_slot", 7}, {"rendezvous", "neighbours"}};
    nlohmann::json none;
    for (const char* f : {"gpu", "hbm", "software", "network", "host", "hang", "sdc", "fail_slow", "nic_flap",
                          "manual_per_day", "benign_spikes_per_day"}) {
      none[f] = 0;
    }
    j["faults"] = none;
    Result<SimConfig> c = ConfigFromJson(j);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    Result<SimResult> r = Simulate(*c);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->fleet.stopped) << gpus;
    EXPECT_EQ(r->fleet.evicted, 0) << gpus;
    EXPECT_LE(r->fleet.restarts, 6) << gpus << " GPUs: restarts must stay bounded";
    std::printf("%d GPUs: stopped after %lld restarts: %s\n", gpus, static_cast<long long>(r->fleet.restarts),
                r->fleet.stop_reason.c_str());
  }
}

// Elastic recovery runs the controller's own narrowing (Reconcile) and the
// ledger's degraded share: with the pool empty and no provisioning, a lost
// machine leaves the job training on fewer replicas instead of waiting, and
// the survivors' restarts skip the process start and the restore.
TEST(Sim, AnElasticJobTrainsOnWhenThePoolIsEmpty) {
  SimConfig c;
  c.gpus = 512;  // 64 machines of one TP-8 replica each
  c.pp = 1;
  c.days = 10;
  c.initial_standbys = 0;
  c.provisioning = false;
  c.rates.per_machine_day[static_cast<int>(FaultClass::kGpu)] *= 10;
  c.recovery = SimConfig::Recovery::kWholeWorld;
  Result<SimResult> standby = Simulate(c);
  c.recovery = SimConfig::Recovery::kElastic;
  Result<SimResult> elastic = Simulate(c);
  ASSERT_TRUE(standby.ok()) << standby.status().ToString();
  ASSERT_TRUE(elastic.ok()) << elastic.status().ToString();
  EXPECT_GT(standby->fleet.waits, 0) << "without standbys a standby job waits";
  EXPECT_EQ(elastic->fleet.waits, 0) << "an elastic job never waits";
  const double degraded = elastic->arms[0].by_category[static_cast<int>(controller::TimeCategory::kDegraded)];
  EXPECT_GT(degraded, 0);
  EXPECT_GT(elastic->arms[0].ettr, standby->arms[0].ettr);
  // The ledger weighs the narrower steps by their pace, as progress does
  // (by the replicas' share it said 88.9% against 83.8%).
  EXPECT_NEAR(elastic->arms[0].ettr, elastic->arms[0].ettr_by_steps, 0.002);
  EXPECT_GT(elastic->arms[0].ettr_by_steps, standby->arms[0].ettr_by_steps);
}

// A pipeline replica (TP 8 x PP 2 here, as TP 8 x PP 10 at 100k GPUs) that
// loses a machine with no standby: the real controller keeps the whole
// pipelines (NarrowerPipelineSlots), the broken one's other machine goes
// back to the pool, and the job trains at 3 of 4 replicas, 1/DP short of
// full throughput, until a provisioned machine makes a pipeline again.
// With a standby at hand the standby takes the slot and nothing is lost but
// the regroup.
TEST(Sim, APipelineReplicaLossCostsOneOverDpUntilAStandbyFillsIt) {
  SimConfig c;
  c.gpus = 64;  // 8 machines: TP 8 x PP 2 x DP 4
  c.tp = 8;
  c.pp = 2;
  c.days = 1;
  c.recovery = SimConfig::Recovery::kElastic;
  c.costs.elastic_micro_batches = 3;  // 4 x 3 micro-batches split evenly over 3 replicas: a step takes 4/3
  c.costs.provision = 3600;
  c.initial_standbys = 0;
  c.script = {{100, FaultClass::kGpu, 0}};  // stage 0 of replica 0
  Result<SimResult> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->fleet.refused, 0) << r->fleet.first_refusal;
  EXPECT_EQ(r->fleet.narrow_restarts, 1);
  EXPECT_EQ(r->fleet.returned_to_pool, 1) << "replica 0's stage-1 machine goes back to the pool";
  EXPECT_GE(r->fleet.regroups, 2) << "the narrowing and the grow back keep the survivors";
  const double degraded = r->arms[0].by_category[static_cast<int>(controller::TimeCategory::kDegraded)];
  // 1/4 of the time at 3 of 4 replicas: from the narrowing until the
  // provisioned machine (an hour) and the pool's one make a pipeline.
  std::printf("pipeline replica lost: degraded %.1f s over ~%.0f s at 3 of 4 replicas\n", degraded, c.costs.provision);
  // The replacement was ordered at the start (the pool's target), so it
  // arrives an hour after t = 0; the fault came at step 100 (~8 min in).
  EXPECT_GT(degraded, 0.25 * (c.costs.provision - 100 * c.costs.step - 60));
  EXPECT_LT(degraded, 0.25 * (c.costs.provision - 100 * c.costs.step + 60));
  EXPECT_NEAR(r->arms[0].ettr, r->arms[0].ettr_by_steps, 0.002);

  c.initial_standbys = 1;  // a standby takes the lost machine's slot
  Result<SimResult> s = Simulate(c);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->fleet.narrow_restarts, 0);
  EXPECT_EQ(s->arms[0].by_category[static_cast<int>(controller::TimeCategory::kDegraded)], 0);
  EXPECT_EQ(s->fleet.regroups, 1);
  EXPECT_GT(s->arms[0].ettr_by_steps, r->arms[0].ettr_by_steps);
}

// The regroup is priced from named coefficients: through the store as
// built, every rank's operations queue at one server whose every operation
// costs more per connected client, so the price grows with W squared; on
// the store-less path (plans, built for elastic ring jobs) nothing on a
// rank's path grows with W but the controller's fan-out (linearly) and the
// ring's abort (with the two-level layout's G + K).
TEST(Sim, TheStoreRegroupGrowsWithTheWorldAndTheNeighboursOneDoesNot) {
  SimConfig store;
  store.gpus = 100000;
  store.pp = 10;
  store.costs.rendezvous = Costs::Rendezvous::kStore;
  SimConfig neighbours = store;
  neighbours.costs.rendezvous = Costs::Rendezvous::kNeighbours;
  double last_store = 0;
  for (int machines : {125, 1250, 12500}) {
    const SimConfig::Price s = store.ElasticRestart(machines, false), n = neighbours.ElasticRestart(machines, false);
    std::printf("%6d machines: regroup store %.1f s, neighbours %.3f s\n", machines, s.Regroup(), n.Regroup());
    EXPECT_GT(s.Regroup(), 50 * last_store + 1e-9) << machines;  // x10 the world: x100 the store's time
    last_store = s.Regroup();
    EXPECT_EQ(n.store, 0);
    EXPECT_EQ(n.links, neighbours.costs.link_dial * neighbours.costs.links_per_survivor) << "a few links, whatever W";
    EXPECT_EQ(n.handshake, neighbours.costs.ring_hop);
    EXPECT_EQ(n.links, s.links);
    EXPECT_EQ(n.fanout, s.fanout);
  }
  EXPECT_GT(store.ElasticRestart(12500, false).Regroup(), 3600) << "the store as built: hours at 100k GPUs";
  EXPECT_LT(neighbours.ElasticRestart(12500, false).Regroup(), 10);
  // The whole-world restart uses the same coefficients, plus new processes.
  const SimConfig::Price w = store.WorldRestart(12500), e = store.ElasticRestart(12500, false);
  EXPECT_EQ(w.store, e.store);
  EXPECT_EQ(w.fanout, e.fanout);
  EXPECT_GT(w.Total(), e.Total());
  EXPECT_NEAR(w.Total() - w.Regroup() - w.step,
              store.costs.process_start + store.costs.comm_init_base + store.costs.restore_memory, 1e-9);
}

// --regroup is an assumption: the price it replaces, the text report and
// --json say so.
TEST(Sim, AnAssumedRegroupIsFlagged) {
  SimConfig c = Small();
  c.days = 2;
  Result<SimResult> priced = Simulate(c);
  ASSERT_TRUE(priced.ok());
  EXPECT_EQ(FormatText(c, *priced).find("GIVEN BY --regroup"), std::string::npos);
  EXPECT_EQ(ToJson(c, *priced, false)["restart_price"]["regroup_source"], "priced from the coefficients");
  // The default is what an elastic job uses as built: plans, no store.
  EXPECT_EQ(ToJson(c, *priced, false)["config"]["rendezvous"], "neighbours");
  EXPECT_EQ(ToJson(c, *priced, false)["config"]["rendezvous_built"], c.Elastic());

  Result<SimConfig> given = ConfigFromJson({{"costs", {{"regroup", 10}}}, {"rendezvous", "neighbours"}}, Small());
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  given->days = 2;
  Result<SimResult> r = Simulate(*given);
  ASSERT_TRUE(r.ok());
  const std::string text = FormatText(*given, *r);
  EXPECT_NE(text.find("regroup 10.0 s GIVEN BY --regroup (an assumption, not priced)"), std::string::npos) << text;
  EXPECT_NE(text.find("as built for an elastic job"), std::string::npos) << text;
  const nlohmann::json j = ToJson(*given, *r, false);
  EXPECT_EQ(j["config"]["regroup_assumed"], true);
  EXPECT_EQ(j["config"]["rendezvous_built"], true);
  // A whole-world job's Gloo mesh has no plans: priced with them, the report
  // says they are not built for it.
  SimConfig whole = Small();
  whole.days = 2;
  whole.recovery = SimConfig::Recovery::kWholeWorld;
  Result<SimResult> w = Simulate(whole);
  ASSERT_TRUE(w.ok());
  EXPECT_NE(FormatText(whole, *w).find("NOT BUILT for a whole-world job"), std::string::npos) << FormatText(whole, *w);
  EXPECT_EQ(ToJson(whole, *w, false)["config"]["rendezvous_built"], false);
  EXPECT_EQ(j["restart_price"]["elastic"]["assumed_regroup_s"], 10.0);
  EXPECT_NE(j["restart_price"]["regroup_source"].get<std::string>().find("assumed"), std::string::npos);
}

// Elastic is the default where the layout allows it (TP 8 x PP 10 at 100k
// GPUs), and every run beside it restarts the whole world on the same
// fault trace: the same faults at the same times on the same slots.
TEST(Sim, ElasticAndWholeWorldSeeTheSameFaultTrace) {
  Result<SimConfig> big = ConfigFromJson({{"gpus", 100000}, {"pp", 10}});
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE(big->Elastic());
  EXPECT_EQ(ToJson(*big)["pp"], 10);
  EXPECT_EQ(ToJson(*big)["recovery"], "elastic");

  SimConfig c = Small();
  Result<SimResult> r = Simulate(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GE(r->arms.size(), 2u);
  EXPECT_EQ(r->arms[0].name, "bulwark elastic");
  EXPECT_EQ(r->arms[1].name, "bulwark whole-world");
  ASSERT_EQ(r->whole_world.size(), 1u);
  EXPECT_GT(r->fleet.trace_faults, 10);
  EXPECT_EQ(r->whole_world[0].trace_faults, r->fleet.trace_faults);
  EXPECT_EQ(r->whole_world[0].trace_digest, r->fleet.trace_digest);
  EXPECT_EQ(ToJson(c, *r, false)["whole_world_fleet"]["same_trace"], true);
  EXPECT_EQ(r->arms[0].faults, r->arms[1].faults) << "no narrowing here: the same faults hit both";
  EXPECT_GT(r->arms[0].ettr_by_steps, r->arms[1].ettr_by_steps) << "survivors skip the process start and restore";
  c.seed = 2;
  Result<SimResult> other = Simulate(c);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->fleet.trace_digest, r->fleet.trace_digest);
}

}  // namespace bulwark::sim
