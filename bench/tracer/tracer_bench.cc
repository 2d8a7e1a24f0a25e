// The tracer's capture time on a training libtorch rank: libdw in-process
// (the agent's default) beside eu-stack, alternating, on the same running
// bulwark-train process. Prints one line per tool (median, min, max over
// the samples) and the thread count. Run: bench/tracer/run.sh.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "agent/tracer.h"
#include "support/process.h"

namespace {

int CountThreads(const std::string& text) {
  int n = 0;
  for (size_t at = text.find("TID "); at != std::string::npos; at = text.find("TID ", at + 4)) ++n;
  return n;
}

void Print(const char* tool, std::vector<double> ms, int threads, int failed, const std::string& why) {
  std::sort(ms.begin(), ms.end());
  if (!ms.empty()) {
    std::printf("%-8s median %6.1f ms  min %6.1f  max %6.1f  (%zu captures, %d threads)", tool, ms[ms.size() / 2],
                ms.front(), ms.back(), ms.size(), threads);
  } else {
    std::printf("%-8s no capture", tool);
  }
  if (failed > 0) std::printf("; %d failed (%s)", failed, why.c_str());
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace bulwark;
  if (argc < 2) {
    std::fprintf(stderr, "usage: tracer_bench DATA_DIR [SAMPLES] [THREADS]  (DATA_DIR from 'bulwark-train prepare')\n");
    return 2;
  }
  const int samples = argc > 2 ? std::atoi(argv[2]) : 10;
  const std::string threads = argc > 3 ? argv[3] : "2";
  testing::Process rank({testing::BinDir() + "/bulwark-train", "--config", "tiny", "--data", argv[1], "--steps",
                         "1000000", "--log-format", "json", "--threads", threads, "--eval-every", "0"});
  if (!rank.WaitForOutput("\"event\":\"step\"", 120)) {
    std::fprintf(stderr, "tracer_bench: bulwark-train did not reach its first step in 120 s\n");
    return 1;
  }
  // A failed capture (the tracer gives up; the agent would try the next
  // tool) is counted, not timed.
  struct Tool {
    agent::StackTool tool;
    std::vector<double> ms;
    int threads = 0, failed = 0;
    std::string why;
  };
  Tool tools[] = {{agent::StackTool::kLibdw}, {agent::StackTool::kEuStack}};
  for (int i = 0; i < samples; ++i) {
    for (Tool& t : tools) {
      auto st = agent::CaptureStacksWith(t.tool, rank.pid(), std::chrono::milliseconds(10000));
      if (!st.ok()) {
        ++t.failed;
        t.why = st.status().message();
        continue;
      }
      t.ms.push_back(st->ms);
      t.threads = CountThreads(st->text);
    }
  }
  for (const Tool& t : tools) Print(agent::StackToolName(t.tool), t.ms, t.threads, t.failed, t.why);
  return tools[0].failed == 0 ? 0 : 1;
}
