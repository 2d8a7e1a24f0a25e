// The controller's report handling histogram (plane/report_latency.h) and
// the bench's reading of it (bench/plane/handling_histogram.h): what a
// window of observations gives as its p50 and p99.
#include "plane/report_latency.h"

#include <gtest/gtest.h>

#include "plane/handling_histogram.h"

namespace bulwark::plane {
namespace {

using std::chrono::microseconds;

TEST(ReportLatency, CountsEachReportInItsBucketAndTheBenchReadsAWindowsQuantiles) {
  ReportLatency l;
  const plane_bench::Buckets empty = plane_bench::ParseHandlingBuckets(l.Metrics());
  for (int i = 0; i < 98; ++i) l.Add(microseconds(3000));
  l.Add(microseconds(300000));
  l.Add(microseconds(300000));
  const std::string text = l.Metrics();
  EXPECT_NE(text.find("# TYPE bulwark_report_handling_seconds histogram"), std::string::npos) << text;
  EXPECT_NE(text.find("bulwark_report_handling_seconds_bucket{le=\"0.002\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("bulwark_report_handling_seconds_bucket{le=\"0.005\"} 98\n"), std::string::npos) << text;
  EXPECT_NE(text.find("bulwark_report_handling_seconds_bucket{le=\"0.5\"} 100\n"), std::string::npos) << text;
  EXPECT_NE(text.find("bulwark_report_handling_seconds_count 100\n"), std::string::npos) << text;
  const plane_bench::Buckets after = plane_bench::ParseHandlingBuckets(text);
  // p50: within (2, 5] ms, half of its 98; p99: the 99th of 100 is the
  // first of the two in (200, 500] ms.
  EXPECT_NEAR(plane_bench::WindowQuantileMs(empty, after, 0.5), 2 + 3 * (50.0 / 98), 0.01);
  EXPECT_NEAR(plane_bench::WindowQuantileMs(empty, after, 0.99), 200 + 300 * 0.5, 0.01);
  // Only what the window added counts.
  for (int i = 0; i < 100; ++i) l.Add(microseconds(700));
  const plane_bench::Buckets later = plane_bench::ParseHandlingBuckets(l.Metrics());
  EXPECT_NEAR(plane_bench::WindowQuantileMs(after, later, 0.99), 0.99, 0.01);
  EXPECT_EQ(plane_bench::WindowQuantileMs(later, later, 0.5), -1) << "an empty window";
}

}  // namespace
}  // namespace bulwark::plane
