// The Runtime Analyzer's pure half: stack texts in, suspects out.
//
// A hang or a fail-slow machine rarely says which rank is at fault; the
// ranks' stacks do. Healthy ranks of a stuck collective all wait in the same
// place; the culprit is somewhere else (computing, in another collective,
// blocked in I/O). So: normalize each rank's main-thread stack to a
// signature (no addresses, offsets, thread ids, template or argument noise),
// group ranks by signature, take the largest group as healthy and the rest as
// outliers, and pick the smallest parallel group (TP, PP, DP) that contains
// every outlier: fast, coarse isolation (ByteRobust §2.5) rather than a hunt
// for the exact culprit. Ranks whose stacks could not be captured (agent
// silent, process gone) count as outliers.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "controller/job.h"
#include "controller/topology.h"

namespace bulwark::controller {

// One rank's stacks as the agent captured them (eu-stack or gdb text); empty
// `text` when capture failed, with `error` saying why.
struct RankStack {
  int rank = 0;
  MachineId machine;
  std::string text;
  std::string error;
};

// The frames of the main thread (the first thread listed) of an eu-stack or
// gdb `thread apply all bt` text, innermost first, normalized: function names
// only; addresses, frame numbers, symbol versions (@GLIBC_2.2.5), argument
// lists, template arguments, clone suffixes (.isra.0, .constprop.1, [clone
// .cold]) and the process start-up frames below main removed. Unnamed frames
// become "??" and runs of them collapse to one. Python frames the tracer
// spliced in ("[py] qualname (file:line)", agent/python_stack.h) keep their
// qualified name and line, their file without its directory: ranks at
// different Python call sites inside the same native code group apart.
std::vector<std::string> NormalizeMainThread(const std::string& text);

// The eu-stack text of process `pid` whose main thread has `frames`
// (innermost first, above the start-up frames), with one idle helper
// thread: what NormalizeMainThread reads back as `frames`. The simulator's
// modelled stacks and the analyzer's tests are written with it.
std::string EuStackText(int pid, const std::vector<std::string>& frames);

// The mark of a Python frame, in a capture and in a normalized frame.
inline constexpr const char* kPythonMark = "[py] ";
bool IsPythonFrame(const std::string& frame);

// A group's frames for people, innermost first: the innermost `limit`, then,
// when Python frames lie deeper (a rank waiting inside a C library), up to
// kSummaryPythonFrames of them after " < ... < ": what it was doing in Python.
inline constexpr size_t kSummaryPythonFrames = 6;
std::string SummarizeFrames(const std::vector<std::string>& frames, size_t limit = 12);

struct StackGroup {
  std::string signature;            // the normalized frames joined by " < "
  std::vector<std::string> frames;  // representative, innermost first
  std::vector<int> ranks;           // ascending
};

struct StackAnalysis {
  std::vector<StackGroup> groups;  // largest first; ties by lowest rank
  bool has_majority = false;       // the largest group is strictly largest
  std::vector<int> outliers;       // ranks outside the healthy group, ascending
  std::vector<int> missing;        // ranks with no stack (counted among outliers)
  std::optional<ParallelGroup> group;  // smallest group holding every outlier
  std::vector<MachineId> suspects;     // machines to over-evict, ascending
  std::string why;                     // one line for the incident; Python ranks: where the outliers are in Python
};

// Groups `stacks` (one per rank of `topology`; ranks absent from `stacks`
// are missing) and chooses what to evict. `machine_of` maps every rank to
// its machine. No outliers, or no strict majority, gives no suspects and a
// `why` that says so: the caller reattempts instead of guessing.
StackAnalysis AnalyzeStacks(const std::vector<RankStack>& stacks, const Topology& topology,
                            const std::map<int, MachineId>& machine_of);

}  // namespace bulwark::controller
