// bulwark-train: the C++ LLM trainer that bulwark supervises.
//   bulwark-train prepare --corpus kjv --out data/kjv
//   bulwark-train --config small --data data/kjv [--key value ...]
//   bulwark-train ... --align [--align-threads N] [--align-steps S] [--align-stage K]   (trainer/diag/align.h)
//   bulwark-train --net-check [--net-timeout S]   under RANK/WORLD_SIZE=2/MASTER_* (trainer/comm/net_check.h)
// Exit codes: common/exit_codes.h.
#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/exit_codes.h"
#include "trainer/diag/align.h"
#include "trainer/config.h"
#include "trainer/comm/net_check.h"
#include "trainer/step/train.h"

using namespace bulwark;

namespace {

// libgomp reads OMP_WAIT_POLICY once, when it is loaded, before main(). Its
// default (threads spin after each parallel region) starves OpenBLAS's own
// threads on a small machine: measured on 2 cores, a step of the small model
// took 1070 ms spinning and 424 ms passive. So unless the user chose a
// policy, set PASSIVE and re-execute this binary (same pid, same arguments)
// so that libgomp sees it. Setting it from a .preinit_array hook does not
// work: glibc's own initializer resets the environment after it runs.
void PreferPassiveOpenMPWaits(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: run on as we are
}

// A step allocates and frees tensors of megabytes (the gradients, the
// exact sum's 64-bit copies of them). glibc gives blocks that large to
// mmap and returns them to the kernel when freed, so every step faulted
// its pages in again: 150 steps of the tiny config, 3 elastic ranks on 2
// cores, took 15.8 s (Gloo) and 25.5 s (the ring) with 350k and 700k page
// faults per rank; with large blocks kept in the heap, 8.0 s and 8.1 s,
// 44k faults (docs/recovery.md, "Figures" of elastic data parallelism). Both
// settings are needed: either alone was slower still. Blocks above 32 MB
// (glibc's ceiling for the threshold) still come from mmap.
void KeepLargeBlocksInTheHeap() {
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

int Fail(const Status& s) {
  std::fflush(stdout);
  std::fprintf(stderr, "\nbulwark-train: error: %s\n", s.message().c_str());
  if (s.code() == Status::Code::kUnavailable) {
    // A peer is gone: other collectives may still be queued in Gloo's worker
    // threads, and the process group's destructor would wait on them. Leave
    // now, so the exit comes within --dist-timeout as promised.
    std::fflush(stderr);
    std::_Exit(ExitCodeFor(s));
  }
  return ExitCodeFor(s);
}

// `prepare` runs in bulwark-prepare, installed beside this binary (see
// prepare_main.cc for why it cannot live in this process).
int ExecPrepare(char** argv) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(argv[0]);
  dir = dir.substr(0, dir.rfind('/') + 1);
  std::string tool = dir + "bulwark-prepare";
  argv[0] = tool.data();
  ::execv(tool.c_str(), argv);
  return Fail(Status::NotFound("cannot run " + tool + " (" + std::strerror(errno) +
                               "); build it with the trainer (make -C build bulwark-prepare)"));
}

}  // namespace

int main(int argc, char** argv) {
  PreferPassiveOpenMPWaits(argv);
  KeepLargeBlocksInTheHeap();
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (!args.empty() && args[0] == "prepare") return ExecPrepare(argv);
    for (const auto& a : args) {
      if (a == "--help" || a == "-h" || a == "help") {
        // The defaults shown are those of the rest of the line (--config
        // tiny --help shows tiny's), else the small preset's.
        std::vector<std::string> rest;
        for (const auto& b : args) {
          if (b != "--help" && b != "-h" && b != "help") rest.push_back(b);
        }
        auto cfg = trainer::ParseTrainArgs(rest);
        if (!cfg.ok()) cfg = trainer::ParseTrainArgs({});
        std::fputs(trainer::UsageText(*cfg).c_str(), stdout);
        return kExitOk;
      }
    }
    // One network link (a stop-time diagnostic): needs no model or data.
    if (!args.empty() && args[0] == "--net-check") {
      double timeout_s = 30;
      if (args.size() == 3 && args[1] == "--net-timeout") timeout_s = std::atof(args[2].c_str());
      if (!(timeout_s > 0) || (args.size() != 1 && args.size() != 3)) {
        return Fail(Status::InvalidArgument("usage: bulwark-train --net-check [--net-timeout SECONDS]"));
      }
      Status s = trainer::RunNetCheck(timeout_s);
      return s.ok() ? kExitOk : Fail(s);
    }
    // Bitwise alignment (a stop-time diagnostic): the job's own arguments
    // say the architecture; --align and its thread count are taken out.
    bool align = false;
    int align_threads = 1, align_steps = 1, align_stage = -1;
    for (size_t i = 0; i < args.size();) {
      if (args[i] == "--align") {
        align = true;
        args.erase(args.begin() + static_cast<long>(i));
      } else if ((args[i] == "--align-threads" || args[i] == "--align-steps" || args[i] == "--align-stage") &&
                 i + 1 < args.size()) {
        const int v = std::atoi(args[i + 1].c_str());
        (args[i] == "--align-threads" ? align_threads : args[i] == "--align-steps" ? align_steps : align_stage) = v;
        args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      } else {
        ++i;
      }
    }
    if (align_threads < 1 || align_steps < 1) {
      return Fail(Status::InvalidArgument("--align-threads and --align-steps must be at least 1"));
    }
    auto cfg = trainer::ParseTrainArgs(args);
    if (!cfg.ok()) return Fail(cfg.status());
    if (align) {
      Status s = trainer::RunAlign(*cfg, align_threads, align_steps, align_stage);
      return s.ok() ? kExitOk : Fail(s);
    }
    Status valid = cfg->Validate();
    if (!valid.ok()) return Fail(valid);
    Status s = trainer::Train(*cfg);
    return s.ok() ? kExitOk : Fail(s);
  } catch (const std::exception& e) {
    // libtorch reports shape errors and the like by throwing; they are bugs
    // or unsupported settings, never a reason to die without a word.
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    return Fail(Status::Internal(what));
  }
}
