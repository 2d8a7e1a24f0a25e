#include "trainer/state/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/files.h"

namespace bulwark::trainer {
namespace {

constexpr char kMarker[] = "COMPLETE";

// Step directories, newest first.
std::vector<std::pair<int64_t, std::string>> StepDirs(const std::string& ckpt_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  for (const std::string& name : ListDir(ckpt_dir)) {
    long long step;
    char tail;
    if (std::sscanf(name.c_str(), "step-%lld%c", &step, &tail) == 1 && IsDirectory(JoinPath(ckpt_dir, name))) {
      out.emplace_back(step, JoinPath(ckpt_dir, name));
    }
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

Result<FoundCheckpoint> Verify(int64_t step, const std::string& dir) {
  auto marker_text = ReadFile(JoinPath(dir, kMarker));
  if (!marker_text.ok()) return Status::FailedPrecondition("incomplete (no COMPLETE marker: the save was interrupted)");
  FoundCheckpoint found;
  found.step = step;
  found.dir = dir;
  std::vector<std::string> files;
  try {
    auto m = nlohmann::json::parse(*marker_text);
    if (m.at("step").get<int64_t>() != step) return Status::Corrupt("marker names step " + m.at("step").dump());
    files = m.at("files").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    return Status::Corrupt(std::string("unreadable COMPLETE marker: ") + e.what());
  }
  for (const std::string& f : files) {
    auto r = RecordReader::Open(JoinPath(dir, f), "ckpt");
    if (!r.ok()) return r.status();
    found.shards.push_back(std::move(*r));
  }
  return found;
}

}  // namespace

std::string StepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string ShardFileName(int rank) { return "rank-" + std::to_string(rank) + ".bin"; }

Status WriteCompleteMarker(const std::string& step_dir, int64_t step, int world_size,
                           const std::vector<std::string>& files) {
  nlohmann::json m = {{"step", step}, {"world_size", world_size}, {"files", files}};
  return WriteFileAtomic(JoinPath(step_dir, kMarker), m.dump() + "\n");
}

bool HasCompleteMarker(const std::string& step_dir) { return PathExists(JoinPath(step_dir, kMarker)); }

std::optional<FoundCheckpoint> FindNewestValid(
    const std::string& ckpt_dir, const std::function<void(const std::string&, const Status&)>& on_skip,
    std::optional<int64_t> at_most) {
  for (auto& [step, dir] : StepDirs(ckpt_dir)) {
    if (at_most && step > *at_most) continue;
    auto found = Verify(step, dir);
    if (found.ok()) return std::move(*found);
    on_skip(dir, found.status());
  }
  return std::nullopt;
}

Status RemoveCheckpointsAfter(const std::string& ckpt_dir, int64_t step) {
  for (auto& [s, dir] : StepDirs(ckpt_dir)) {
    if (s > step) BULWARK_RETURN_IF_ERROR(RemoveTree(dir));
  }
  return Status::OK();
}

Status PruneCheckpoints(const std::string& ckpt_dir, int keep) {
  int complete = 0;
  for (auto& [step, dir] : StepDirs(ckpt_dir)) {
    bool is_complete = PathExists(JoinPath(dir, kMarker));
    if (is_complete && ++complete <= keep) continue;
    if (!is_complete && complete == 0) continue;  // may be a save in progress
    BULWARK_RETURN_IF_ERROR(RemoveTree(dir));
  }
  return Status::OK();
}

}  // namespace bulwark::trainer
