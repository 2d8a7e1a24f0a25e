// The agent's own Prometheus metrics (agent/agent_metrics.h): rendered from
// a snapshot, checked by `promtool check metrics` the way a Prometheus server
// would read them, with the values a dashboard relies on. The live endpoint
// is checked end to end in ecosystem_cluster_test.
#include <gtest/gtest.h>

#include <fstream>

#include "agent/agent_metrics.h"
#include "support/process.h"

namespace bulwark::agent {
namespace {

// promtool's verdict on `text`: "" when it passes, else what it printed.
std::string Promtool(const std::string& text) {
  const std::string path = testing::MakeTempDir() + "/metrics.txt";
  std::ofstream(path) << text;
  testing::ProcessResult r = testing::Run({"/bin/sh", "-c", "promtool check metrics < " + path}, {}, 30);
  if (r.exit_code == 0) return "";
  return "promtool exit " + std::to_string(r.exit_code) + ": " + r.out + r.err;
}

bool Has(const std::string& text, const std::string& line) { return text.find("\n" + line + "\n") != std::string::npos; }

TEST(AgentMetrics, AFreshAgentPassesPromtoolWithEveryFamilyPresent) {
  AgentSnapshot s;
  s.machine = "m01";
  const std::string t = RenderAgentMetrics(s, {}, ShardStats{});
  EXPECT_EQ(Promtool(t), "") << t;
  // The set of names does not wait for something to happen.
  for (const char* family : {"bulwark_agent_rank_up", "bulwark_agent_rank_exits_total", "bulwark_agent_shard_step",
                             "bulwark_agent_inspection_failures_total", "bulwark_agent_shard_push_seconds"}) {
    EXPECT_NE(t.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  }
  EXPECT_TRUE(Has(t, "bulwark_agent_live_ranks 0")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_push_seconds_count 0")) << t;
  // No reading yet: no health samples rather than a made-up "ok".
  EXPECT_EQ(t.find("bulwark_agent_inspection_ok{"), std::string::npos) << t;
}

TEST(AgentMetrics, RanksShardCopiesStoreLatenciesAndInspectionsAreServed) {
  AgentSnapshot s;
  s.machine = "m02";
  s.registered = true;
  s.generation = 3;
  s.live_ranks = {2, 3};
  s.rank_restarts = {{2, 2}};
  s.rank_exits = {{{2, "signal"}, 1}, {{2, "peer_lost"}, 1}};
  s.job_step = 0;
  s.inspected = true;
  s.health.device_ok = false;
  s.health.device_detail = "Xid 79";
  s.inspection_failures = {{"device", 1}};
  std::vector<ShardHolding> holdings = {{2, 120, false}, {3, 119, false}, {0, 120, true}};
  ShardStats stats;
  stats.pushed = 3;
  stats.persisted = 1;
  stats.push_failures_total = 2;
  for (double ms : {0.5, 3.0, 40.0}) stats.push.Observe(ms);
  stats.persist.Observe(700);
  stats.last_fetch_ms = 250;

  const std::string t = RenderAgentMetrics(s, holdings, stats);
  EXPECT_EQ(Promtool(t), "") << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_registered 1")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_generation 3")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_live_ranks 2")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_rank_up{rank=\"3\"} 1")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_rank_restarts_total{rank=\"2\"} 2")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_rank_exits_total{rank=\"2\",how=\"signal\"} 1")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_step{rank=\"2\",copy=\"primary\"} 120")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_step{rank=\"0\",copy=\"backup\"} 120")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_pushes_total 3")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_push_failures_total 2")) << t;
  // Buckets are cumulative and in seconds: 0.5 ms <= 1 ms; 3 ms first fits 5 ms.
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_push_seconds_bucket{le=\"0.001\"} 1")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_push_seconds_bucket{le=\"0.0025\"} 1")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_push_seconds_bucket{le=\"0.005\"} 2")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_push_seconds_bucket{le=\"0.05\"} 3")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_push_seconds_bucket{le=\"+Inf\"} 3")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_push_seconds_sum 0.0435")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_persist_seconds_bucket{le=\"0.5\"} 0")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_persist_seconds_bucket{le=\"1\"} 1")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_shard_fetch_seconds 0.25")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_inspection_ok{check=\"device\"} 0")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_inspection_ok{check=\"nic\"} 1")) << t;
  EXPECT_TRUE(Has(t, "bulwark_agent_inspection_failures_total{check=\"device\"} 1")) << t;
}

}  // namespace
}  // namespace bulwark::agent
