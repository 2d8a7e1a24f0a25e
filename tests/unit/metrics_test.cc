// Prometheus metrics: the text format itself, a Plane's metrics through a
// device failure (an incident, an eviction, a standby swap), served over
// HTTP by the MetricsServer, and checked by `promtool check metrics` (Debian's
// prometheus package) the way a Prometheus server would read them.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdio>
#include <fstream>
#include <regex>

#include "agent/agent_metrics.h"
#include "common/metrics_server.h"
#include "common/metrics_text.h"
#include "plane/plane.h"
#include "support/agent_messages.h"
#include "support/process.h"

namespace bulwark::plane {
namespace {

using testing::DeviceFailed;
using testing::Reg;
using testing::Report;
using testing::Step;

// promtool's verdict on `text`: "" when it passes, else what it printed.
std::string Promtool(const std::string& text) {
  const std::string path = testing::MakeTempDir() + "/metrics.txt";
  std::ofstream(path) << text;
  testing::ProcessResult r = testing::Run({"/bin/sh", "-c", "promtool check metrics < " + path}, {}, 30);
  if (r.exit_code == 0) return "";
  return "promtool exit " + std::to_string(r.exit_code) + ": " + r.out + r.err;
}

double Value(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

TEST(MetricsText, EscapesLabelValuesAndSpellsSpecialValues) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(FormatSampleValue(3), "3");
  EXPECT_EQ(FormatSampleValue(0.25), "0.25");
  EXPECT_EQ(FormatSampleValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatSampleValue(1.0 / 0.0), "+Inf");
  MetricsText m;
  m.Family("x_seconds", "gauge", "A test.");
  m.Sample("x_seconds", {{"job", "a\"b"}}, 1.5);
  EXPECT_EQ(m.text(), "# HELP x_seconds A test.\n# TYPE x_seconds gauge\nx_seconds{job=\"a\\\"b\"} 1.5\n");
  EXPECT_EQ(Promtool(m.text()), "");
}

TEST(MetricsText, HistogramBucketsAreCumulative) {
  MetricsText m;
  m.Histogram("d_seconds", "Durations.", {1, 10}, {0.5, 2, 3, 20});
  const std::string& t = m.text();
  EXPECT_NE(t.find("d_seconds_bucket{le=\"1\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("d_seconds_bucket{le=\"10\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("d_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << t;
  EXPECT_NE(t.find("d_seconds_sum 25.5\n"), std::string::npos) << t;
  EXPECT_NE(t.find("d_seconds_count 4\n"), std::string::npos) << t;
  EXPECT_EQ(Promtool(t), "");
}

// Two machines train, m02's device fails at 3 s, the standby m03 takes
// over, and the job steps again at 5 s.
std::unique_ptr<Plane> PlaneThroughADeviceFailure() {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  for (const char* m : {"m01", "m02", "m03"}) EXPECT_TRUE((*p)->Register(Reg(m), TimeFromMs(1000)).ok());
  JobLaunch l;
  l.spec.id = "demo";
  l.spec.world_size = 2;
  l.argv = {"/bin/true"};
  EXPECT_TRUE((*p)->Submit(l, TimeFromMs(1000)).ok());
  EXPECT_TRUE((*p)->Report(Report("m01", {Step(1, 5, 1, 2000)}), TimeFromMs(2000)).ok());
  wire::AgentEvent dev;
  dev.set_kind(wire::AgentEvent::INSPECTION_FAILED);
  dev.set_seq(1);
  dev.set_inspection("device");
  dev.set_detail("Xid 48");
  dev.set_observed_ms(3000);
  EXPECT_TRUE((*p)->Report(Report("m02", {dev}), TimeFromMs(3000)).ok());
  EXPECT_TRUE((*p)->Report(Report("m01", {Step(2, 6, 2, 5000)}), TimeFromMs(5000)).ok());
  return std::move(*p);
}

TEST(Metrics, APlaneThroughADeviceFailurePassesPromtoolAndCountsIt) {
  std::unique_ptr<Plane> p = PlaneThroughADeviceFailure();
  const std::string t = p->Metrics(TimeFromMs(6000));
  EXPECT_EQ(Promtool(t), "") << t;
  EXPECT_EQ(Value(t, "bulwark_job_step{job=\"demo\"}"), 6) << t;
  EXPECT_EQ(Value(t, "bulwark_job_generation{job=\"demo\"}"), 2) << t;
  EXPECT_EQ(Value(t, "bulwark_incidents{class=\"explicit\",resolution=\"evicted_and_replaced\"}"), 1) << t;
  EXPECT_EQ(Value(t, "bulwark_evictions_total"), 1) << t;
  EXPECT_EQ(Value(t, "bulwark_incident_recover_seconds_count"), 1) << t;
  EXPECT_EQ(Value(t, "bulwark_job_wall_seconds_total{job=\"demo\"}"), 5) << t;
  // Productive: the steps before the fault (1 s to 2 s is startup, 2 s to
  // 3 s's fault throws the step in flight away).
  EXPECT_GT(Value(t, "bulwark_job_ettr_ratio{job=\"demo\",scope=\"cumulative\"}"), 0) << t;
  EXPECT_EQ(Value(t, "bulwark_machine_state{machine=\"m02\",state=\"evicted\"}"), 1) << t;
  EXPECT_EQ(Value(t, "bulwark_machine_heartbeat_age_seconds{machine=\"m03\"}"), 5) << t;
  EXPECT_EQ(Value(t, "bulwark_standby_available"), 0) << t;
  // Every ledger category is a series, so a dashboard's stack never has holes.
  for (const char* c : {"productive", "startup", "detection", "localization", "recovery", "recomputation", "waiting",
                        "manual"}) {
    EXPECT_NE(t.find("bulwark_job_time_seconds_total{job=\"demo\",category=\"" + std::string(c) + "\"}"),
              std::string::npos) << c;
  }
}

// The shipped dashboard and scrape config: the config is valid for
// promtool, and every series the dashboard charts is one the plane or an
// agent serves (a renamed metric must not leave an empty panel behind).
TEST(Metrics, ShippedDashboardChartsOnlySeriesThePlaneOrAnAgentServes) {
  testing::ProcessResult r =
      testing::Run({"/bin/sh", "-c", "promtool check config " + std::string(BULWARK_CONFIG_DIR) + "/prometheus/prometheus.yml"}, {}, 30);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(std::string(BULWARK_CONFIG_DIR) + "/grafana/bulwark-dashboard.json");
  nlohmann::json dash = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(dash.is_object()) << "bulwark-dashboard.json is not JSON";
  std::unique_ptr<Plane> p = PlaneThroughADeviceFailure();
  // An agent that has seen a bit of everything, so each family has samples.
  agent::AgentSnapshot a;
  a.live_ranks = {0};
  a.rank_exits = {{{0, "signal"}, 1}};
  a.inspection_failures = {{"device", 1}};
  agent::ShardStats stats;
  stats.push.Observe(3);
  const std::string t = p->Metrics(TimeFromMs(6000)) + agent::RenderAgentMetrics(a, {{0, 40, false}}, stats);
  int exprs = 0;
  const std::regex name("bulwark_[a-z_]+");
  for (const nlohmann::json& panel : dash["panels"]) {
    for (const nlohmann::json& target : panel["targets"]) {
      const std::string expr = target["expr"];
      ++exprs;
      for (std::sregex_iterator it(expr.begin(), expr.end(), name), end; it != end; ++it) {
        EXPECT_NE(t.find("\n" + it->str()), std::string::npos) << panel["title"] << ": " << it->str();
      }
    }
  }
  EXPECT_GE(exprs, 10);
}

// tokens/s comes from rank 0's step signals: tokens over step time across
// its recent reports; other ranks' counts and held-back steps do not add.
TEST(Metrics, TokensPerSecondComesFromRankZerosStepSignals) {
  std::unique_ptr<Plane> p = PlaneThroughADeviceFailure();  // the job runs generation 2 on m01 and m03
  std::string t = p->Metrics(TimeFromMs(6000));
  EXPECT_EQ(Value(t, "bulwark_job_tokens_per_second{job=\"demo\"}"), 0) << t;
  auto signal = [](int rank, int steps, double ms, int64_t tokens, const std::string& halted) {
    wire::RankSignal s;
    s.set_rank(rank);
    s.set_generation(2);
    s.set_step(10);
    s.set_steps(steps);
    s.set_step_ms(ms);
    s.set_tokens(tokens);
    s.set_halted(halted);
    s.set_observed_ms(6000);
    return s;
  };
  wire::ReportRequest r = Report("m01", {});
  *r.add_signals() = signal(0, 4, 400, 4 * 8192, "");   // 81,920 tokens/s
  *r.add_signals() = signal(1, 4, 100, 999999, "");     // another rank's count: not the job's
  *r.add_signals() = signal(0, 1, 50, 8192, "nan");     // held back: processed nothing
  ASSERT_TRUE(p->Report(r, TimeFromMs(6000)).ok());
  r = Report("m01", {});
  *r.add_signals() = signal(0, 2, 400, 2 * 8192, "");   // slower: 40,960 tokens/s
  ASSERT_TRUE(p->Report(r, TimeFromMs(6500)).ok());
  t = p->Metrics(TimeFromMs(7000));
  EXPECT_EQ(Promtool(t), "") << t;
  EXPECT_EQ(Value(t, "bulwark_job_tokens_per_second{job=\"demo\"}"), 6 * 8192 * 1000.0 / 800) << t;
  EXPECT_EQ(Value(t, "bulwark_job_tokens_total{job=\"demo\"}"), 6 * 8192) << t;
}

TEST(Metrics, AFleetWithoutAJobStillPassesPromtool) {
  PlaneOptions o;
  o.db_path = testing::MakeTempDir() + "/c.db";
  auto p = Plane::Open(o, TimeFromMs(1000));
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Register(Reg("m01"), TimeFromMs(1000)).ok());
  const std::string t = (*p)->Metrics(TimeFromMs(1500));
  EXPECT_EQ(Promtool(t), "") << t;
  EXPECT_EQ(t.find("bulwark_job_"), std::string::npos) << t;
}

TEST(MetricsServer, ServesTheRenderedTextOverHttp) {
  auto s = MetricsServer::Start("127.0.0.1", 0, [] { return std::string("# HELP up_x A.\n# TYPE up_x gauge\nup_x 1\n"); });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_GT((*s)->port(), 0);
  EXPECT_EQ((*s)->url(), "http://127.0.0.1:" + std::to_string((*s)->port()) + "/metrics");
  httplib::Client c("127.0.0.1", (*s)->port());
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res) << "no answer";
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "# HELP up_x A.\n# TYPE up_x gauge\nup_x 1\n");
  EXPECT_NE(res->get_header_value("Content-Type").find("version=0.0.4"), std::string::npos);
  // A second server on the same port: a one-line error, not a crash.
  auto again = MetricsServer::Start("127.0.0.1", (*s)->port(), [] { return std::string(); });
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("--metrics-port"), std::string::npos);
}

}  // namespace
}  // namespace bulwark::plane
