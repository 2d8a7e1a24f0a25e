// The demo report is a pure function of the run record: these tests feed it
// a small hand-made run (one reattempt, one tolerated flap, one wait) and
// check what a reader relies on.
#include <gtest/gtest.h>

#include "demo/report.h"

namespace bulwark::demo {
namespace {

using nlohmann::json;

json Segment(int64_t a, int64_t b, const char* c) { return {{"start_ms", a}, {"end_ms", b}, {"category", c}}; }

json Breakdown(double wall, double productive, double detection, double recovery) {
  return {{"wall_s", wall}, {"ettr", productive / wall},
          {"seconds", {{"productive", productive}, {"detection", detection}, {"recovery", recovery}, {"startup", 0.0}}}};
}

json SampleRun() {
  const int64_t t0 = 1'000'000;
  json incident{{"id", 1}, {"class", "explicit"}, {"cause", "rank 0 on m01 exited: <uncaught exception>"},
                {"evicted", json::array()}, {"resolution", "reattempt"}, {"why", "software fault"},
                {"detected_ms", t0 + 11'000}, {"fault_ms", t0 + 10'000}, {"decision_ms", t0 + 11'000},
                {"recovered_ms", t0 + 15'000}, {"detect_s", 1.0}, {"recover_s", 4.0}, {"lost_steps", 7}, {"closed", true}};
  return {{"title", "test run"},
          {"started_ms", t0},
          {"ended_ms", t0 + 40'000},
          {"setup", {{"machines", 4}}},
          {"schedule", {{{"at_ms", t0 + 10'000}, {"fault", "crash"}, {"machine", "m01"}, {"incident", 1}},
                        {{"at_ms", t0 + 25'000}, {"fault", "nic-flap"}, {"machine", "m02"}, {"incident", nullptr},
                         {"note", "tolerated: no incident, no restart"}}}},
          {"incidents", {incident}},
          {"ledger", {{"cumulative", Breakdown(40, 35, 1, 4)}, {"window", Breakdown(40, 35, 1, 4)}, {"window_s", 3600},
                      {"timeline", {Segment(t0, t0 + 10'000, "productive"), Segment(t0 + 10'000, t0 + 11'000, "detection"),
                                    Segment(t0 + 11'000, t0 + 15'000, "recovery"), Segment(t0 + 15'000, t0 + 40'000, "productive")}}}},
          {"outcome", {{"completed", true}, {"step", 300}, {"loss", 4.25}, {"message", "every fault was recovered from"}}}};
}

TEST(DemoReport, HtmlIsSelfContainedWithTheTimelineInline) {
  Result<Report> r = RenderReport(SampleRun());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->html.find("<svg"), std::string::npos);
  EXPECT_NE(r->html.find(r->svg), std::string::npos);
  // No network resources: no scripts, links, images or stylesheets to fetch.
  for (const char* bad : {"<script", "<link", "<img", "src=", "href=", "@import"}) {
    EXPECT_EQ(r->html.find(bad), std::string::npos) << bad;
  }
}

TEST(DemoReport, HeadlineLedgerAndEveryInjectionAreShown) {
  Result<Report> r = RenderReport(SampleRun());
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->svg.find("ETTR 87.5%"), std::string::npos);
  EXPECT_NE(r->markdown.find("ETTR **87.5%**"), std::string::npos);
  EXPECT_NE(r->markdown.find("Training completed"), std::string::npos);
  EXPECT_NE(r->markdown.find("| recovery | 4.0 | 10.0% |"), std::string::npos) << r->markdown;
  EXPECT_NE(r->markdown.find("| 1 | crash | m01 | +10.0 s | #1 | reattempt | 1.00 s | 4.0 s | 7 |"), std::string::npos) << r->markdown;
  EXPECT_NE(r->markdown.find("tolerated: no incident"), std::string::npos);
  EXPECT_NE(r->svg.find("1. crash m01"), std::string::npos);
  EXPECT_NE(r->svg.find("2. nic-flap m02"), std::string::npos);
  EXPECT_NE(r->svg.find("#1 reattempt: detect 1.00 s, recover 4.0 s, lost 7 steps"), std::string::npos);
}

TEST(DemoReport, WhereEachRestoreCameFromIsShownWithItsLostSteps) {
  json run = SampleRun();
  run["incidents"][0]["restore_source"] = "peer";
  Result<Report> r = RenderReport(run);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->markdown.find("| 4.0 s | 7 (peer) |"), std::string::npos) << r->markdown;
  EXPECT_NE(r->html.find("<td>7 (peer)</td>"), std::string::npos);
  EXPECT_NE(r->svg.find("lost 7 steps (peer)"), std::string::npos);
  EXPECT_NE(IncidentTable(run["incidents"], run["schedule"]).find("7 (peer)"), std::string::npos);
}

TEST(DemoReport, ImplicitIncidentsShowTheirStackGroups) {
  json run = SampleRun();
  run["incidents"][0]["class"] = "implicit";
  run["incidents"][0]["stacks"] = {
      {"why", "outlier rank(s) {2} of 2 stack groups; on m03"},
      {"groups", {{{"count", 3}, {"ranks", {0, 1, 3}}, {"stack", "wait < c10d::Work::wait < AllReduceSum < main"}},
                  {{"count", 1}, {"ranks", {2}}, {"stack", "waitRecv < RecvWork::wait<float> < main"}}}},
      {"missing", json::array()}, {"group", ""}, {"suspects", {"m03"}}};
  Result<Report> r = RenderReport(run);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->markdown.find("### Incident 1: stack groups"), std::string::npos) << r->markdown;
  EXPECT_NE(r->markdown.find("| {0,1,3} | 3 | `wait < c10d::Work::wait < AllReduceSum < main` |"), std::string::npos)
      << r->markdown;
  EXPECT_NE(r->html.find("<td>{2}</td><td>1</td><td><code>waitRecv &lt; RecvWork::wait&lt;float&gt; &lt; main</code>"),
            std::string::npos)
      << r->html;
}

TEST(DemoReport, AnIncidentThatClimbedTheLadderShowsARowPerRung) {
  json run = SampleRun();
  run["incidents"][0]["ladder"] = {
      {{"rung", "diagnose"}, {"started_ms", 1'012'000}, {"seconds", 4.4}, {"outcome", "all 4 machine(s) passed diagnostics"}},
      {{"rung", "rollback"}, {"started_ms", 1'016'400}, {"seconds", 0.0}, {"outcome", "no earlier release: nothing to roll back"}},
      {{"rung", "replay"}, {"started_ms", 1'016'400}, {"seconds", 21.3}, {"outcome", "culprit m03 (h1 x v0)"}}};
  Result<Report> r = RenderReport(run);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->markdown.find("### Incident 1: the stop-time ladder"), std::string::npos) << r->markdown;
  EXPECT_NE(r->markdown.find("| diagnose | +12.0 s | 4.4 s | all 4 machine(s) passed diagnostics |"), std::string::npos)
      << r->markdown;
  EXPECT_NE(r->markdown.find("| replay | +16.4 s | 21.3 s | culprit m03 (h1 x v0) |"), std::string::npos) << r->markdown;
  EXPECT_NE(r->html.find("<tr><td>replay</td><td>+16.4 s</td><td>21.3</td><td>culprit m03 (h1 x v0)</td></tr>"),
            std::string::npos)
      << r->html;
  EXPECT_EQ(RenderReport(SampleRun())->markdown.find("stop-time ladder"), std::string::npos) << "no ladder, no section";
}

TEST(DemoReport, AnElasticJobsNarrowerIntervalIsShownInItsFaultsRow) {
  json run = SampleRun();
  json& inc = run["incidents"][0];
  inc["trained_on"] = 3;
  inc["rejoined_ms"] = 1'025'000;
  inc["degraded_s"] = 10.0;
  run["ledger"]["timeline"][3] = Segment(1'015'000, 1'025'000, "degraded");
  run["ledger"]["timeline"].push_back(Segment(1'025'000, 1'040'000, "productive"));
  run["ledger"]["cumulative"]["seconds"]["degraded"] = 10.0;
  Result<Report> r = RenderReport(run);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The row's own band (its title has no "at +"), beside the ledger's bar.
  EXPECT_NE(r->svg.find("<title>degraded 10.0 s</title>"), std::string::npos) << r->svg;
  EXPECT_NE(r->svg.find("<title>degraded 10.0 s at +15.0 s</title>"), std::string::npos);
  EXPECT_NE(r->svg.find("then 3 replicas for 10.0 s"), std::string::npos);
  EXPECT_NE(r->markdown.find("reattempt, then 3 replicas for 10.0 s"), std::string::npos) << r->markdown;
  EXPECT_NE(r->svg.find("training on fewer replicas"), std::string::npos) << "the legend names it";
}

TEST(DemoReport, TextFromTheClusterIsEscaped) {
  Result<Report> r = RenderReport(SampleRun());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->html.find("<uncaught"), std::string::npos);
  EXPECT_NE(r->html.find("&lt;uncaught exception&gt;"), std::string::npos);
}

TEST(DemoReport, AFailedRunSaysSo) {
  json run = SampleRun();
  run["outcome"] = {{"completed", false}, {"step", 120}, {"message", "the job did not recover from kill on m02"}};
  Result<Report> r = RenderReport(run);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->markdown.find("Training did NOT complete"), std::string::npos);
  EXPECT_NE(r->html.find("did not recover from kill on m02"), std::string::npos);
}

TEST(DemoReport, MissingPartsAreRefusedByName) {
  json run = SampleRun();
  run.erase("ledger");
  EXPECT_EQ(RenderReport(run).status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(RenderReport(run).status().message().find("'ledger'"), std::string::npos);
  run = SampleRun();
  run["ledger"]["timeline"] = json::array();
  EXPECT_EQ(RenderReport(run).status().code(), Status::Code::kInvalidArgument);
}

TEST(DemoReport, SlidingEttrDipsAfterTheFaultAndRecovers) {
  const json tl = SampleRun()["ledger"]["timeline"];
  const json pts = SlidingEttr(tl, 10, 41);  // a point a second over 40 s
  ASSERT_EQ(pts.size(), 41u);
  EXPECT_DOUBLE_EQ(pts[10][1].get<double>(), 1.0);   // all productive so far
  EXPECT_DOUBLE_EQ(pts[15][1].get<double>(), 0.5);   // [5, 15]: 5 s productive, 5 s lost
  EXPECT_DOUBLE_EQ(pts[40][1].get<double>(), 1.0);   // [30, 40]: back to productive
}

TEST(DemoReport, TerminalTablesListEveryInjection) {
  const json run = SampleRun();
  const std::string t = IncidentTable(run["incidents"], run["schedule"]);
  EXPECT_NE(t.find("crash"), std::string::npos);
  EXPECT_NE(t.find("reattempt"), std::string::npos);
  EXPECT_NE(t.find("tolerated"), std::string::npos);
  const std::string l = LedgerTable(run["ledger"]);
  EXPECT_NE(l.find("ETTR 87.5% cumulative"), std::string::npos) << l;
}

}  // namespace
}  // namespace bulwark::demo
