#include "agent/agent_metrics.h"

#include "common/metrics_text.h"

namespace bulwark::agent {
namespace {

std::vector<double> Seconds(const double* ms, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(ms[i] / 1000.0);
  return out;
}

void Latency(MetricsText& m, const std::string& name, const std::string& help, const LatencyBuckets& b) {
  m.HistogramCounts(name, help, Seconds(LatencyBuckets::kBoundsMs, LatencyBuckets::kBounds),
                    std::vector<int64_t>(b.at_or_below, b.at_or_below + LatencyBuckets::kBounds), b.count,
                    b.sum_ms / 1000.0);
}

}  // namespace

std::string RenderAgentMetrics(const AgentSnapshot& s, const std::vector<ShardHolding>& holdings,
                               const ShardStats& stats) {
  MetricsText m;
  m.Family("bulwark_agent_uptime_seconds", "gauge", "Seconds since this agent started.");
  m.Sample("bulwark_agent_uptime_seconds", {}, s.uptime_s);
  m.Family("bulwark_agent_registered", "gauge", "1 when the controller accepted this agent's registration.");
  m.Sample("bulwark_agent_registered", {}, s.registered ? 1 : 0);
  m.Family("bulwark_agent_report_age_seconds", "gauge",
           "Seconds since the controller last acknowledged a report (heartbeat) of this agent.");
  m.Sample("bulwark_agent_report_age_seconds", {}, s.since_report_ok_s);

  // --- ranks
  m.Family("bulwark_agent_generation", "gauge", "Generation of the ranks this agent runs (0: none started yet).");
  m.Sample("bulwark_agent_generation", {}, static_cast<double>(s.generation));
  m.Family("bulwark_agent_live_ranks", "gauge", "Ranks running on this machine.");
  m.Sample("bulwark_agent_live_ranks", {}, static_cast<double>(s.live_ranks.size()));
  m.Family("bulwark_agent_rank_up", "gauge", "1 for each rank running on this machine.");
  for (int r : s.live_ranks) m.Sample("bulwark_agent_rank_up", {{"rank", std::to_string(r)}}, 1);
  m.Family("bulwark_agent_rank_restarts_total", "counter",
           "Times a rank's process was replaced by a new one on this machine.");
  for (const auto& [rank, n] : s.rank_restarts) {
    m.Sample("bulwark_agent_rank_restarts_total", {{"rank", std::to_string(rank)}}, static_cast<double>(n));
  }
  m.Family("bulwark_agent_rank_exits_total", "counter",
           "Rank exits the agent did not ask for, by how: error (non-zero code), signal, peer_lost.");
  for (const auto& [key, n] : s.rank_exits) {
    m.Sample("bulwark_agent_rank_exits_total", {{"rank", std::to_string(key.first)}, {"how", key.second}},
             static_cast<double>(n));
  }
  m.Family("bulwark_agent_job_step", "gauge", "Newest step rank 0 reported on this machine (0 where rank 0 is not).");
  m.Sample("bulwark_agent_job_step", {}, static_cast<double>(s.job_step));

  // --- checkpoint shard copies held in memory
  m.Family("bulwark_agent_shard_step", "gauge",
           "Newest step of each rank's shard held here; copy=primary (its own ranks) or backup (for another machine).");
  for (const ShardHolding& h : holdings) {
    m.Sample("bulwark_agent_shard_step", {{"rank", std::to_string(h.rank)}, {"copy", h.backup ? "backup" : "primary"}},
             static_cast<double>(h.step));
  }
  m.Family("bulwark_agent_shard_pushes_total", "counter", "Shard images pushed to the backup peer.");
  m.Sample("bulwark_agent_shard_pushes_total", {}, static_cast<double>(stats.pushed));
  m.Family("bulwark_agent_shard_push_failures_total", "counter", "Pushes to the backup peer that failed.");
  m.Sample("bulwark_agent_shard_push_failures_total", {}, static_cast<double>(stats.push_failures_total));
  m.Family("bulwark_agent_shard_persists_total", "counter", "Shard images persisted to durable storage.");
  m.Sample("bulwark_agent_shard_persists_total", {}, static_cast<double>(stats.persisted));
  m.Family("bulwark_agent_shard_persist_failures_total", "counter", "Persists to durable storage that failed.");
  m.Sample("bulwark_agent_shard_persist_failures_total", {}, static_cast<double>(stats.persist_failures));
  m.Family("bulwark_agent_shard_superseded_total", "counter",
           "Images skipped because a newer one of the same rank was already waiting.");
  m.Sample("bulwark_agent_shard_superseded_total", {}, static_cast<double>(stats.superseded));
  m.Family("bulwark_agent_shard_refused_total", "counter",
           "Peer connections or pushed images refused (authentication, size or rank checks).");
  m.Sample("bulwark_agent_shard_refused_total", {}, static_cast<double>(stats.refused));
  Latency(m, "bulwark_agent_shard_push_seconds", "Time to push one shard image to the backup peer.", stats.push);
  Latency(m, "bulwark_agent_shard_persist_seconds", "Time to persist one shard image to durable storage.",
          stats.persist);
  m.Family("bulwark_agent_shard_fetch_seconds", "gauge",
           "Time the last fetch of this machine's shards from peers took, before a restore (0: none yet).");
  m.Sample("bulwark_agent_shard_fetch_seconds", {}, stats.last_fetch_ms / 1000.0);

  // --- inspections
  m.Family("bulwark_agent_inspection_ok", "gauge",
           "1 when the latest health check of this kind passed (device, disk, memory, nic).");
  if (s.inspected) {
    m.Sample("bulwark_agent_inspection_ok", {{"check", "device"}}, s.health.device_ok ? 1 : 0);
    m.Sample("bulwark_agent_inspection_ok", {{"check", "disk"}}, s.health.disk_ok ? 1 : 0);
    m.Sample("bulwark_agent_inspection_ok", {{"check", "memory"}}, s.health.memory_ok ? 1 : 0);
    m.Sample("bulwark_agent_inspection_ok", {{"check", "nic"}}, s.health.nic_up ? 1 : 0);
  }
  m.Family("bulwark_agent_inspection_failures_total", "counter",
           "Failed inspections reported to the controller, by check (device, disk, memory, nic, process).");
  for (const auto& [check, n] : s.inspection_failures) {
    m.Sample("bulwark_agent_inspection_failures_total", {{"check", check}}, static_cast<double>(n));
  }
  return m.text();
}

}  // namespace bulwark::agent
