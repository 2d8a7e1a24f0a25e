#include "cluster/local/emulated_hardware.h"

#include <cstdlib>

#include "cluster/layout.h"
#include "common/files.h"

namespace bulwark::cluster {
namespace {

// The file's first line, "" when it cannot be read.
std::string FirstLine(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return "";
  std::string s = text->substr(0, text->find('\n'));
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

Status Write(const std::string& path, const std::string& line) { return WriteFileAtomic(path, line + "\n"); }

}  // namespace

EmulatedHardware HardwareOf(const std::string& dir, const std::string& id) {
  const Layout layout{dir};
  return {layout.device(id), layout.nic(id), layout.health(id) + "/alu", layout.health(id) + "/link",
          layout.health(id) + "/sdc", layout.health(id) + "/pace"};
}

Status FailDevice(const EmulatedHardware& hw) {
  return Write(hw.device, "Xid 48: uncorrectable ECC error (double-bit) on device 0");
}

namespace {

// "down until <ms> flaps <n>": the flap's end and the flaps so far.
struct NicState {
  bool down = false;  // for good, or until `until`
  int64_t until = -1;
  uint64_t flaps = 0;
};

NicState ReadNic(const EmulatedHardware& hw) {
  const std::string s = FirstLine(hw.nic);
  NicState n;
  n.down = s.rfind("down", 0) == 0;
  if (size_t at = s.find(" until "); at != std::string::npos) n.until = std::atoll(s.c_str() + at + 7);
  if (size_t at = s.find(" flaps "); at != std::string::npos) n.flaps = std::strtoull(s.c_str() + at + 7, nullptr, 10);
  return n;
}

}  // namespace

Status FlapNic(const EmulatedHardware& hw, std::chrono::milliseconds down, int64_t now_ms) {
  const uint64_t flaps = ReadNic(hw).flaps + 1;
  return Write(hw.nic, "down until " + std::to_string(now_ms + down.count()) + " flaps " + std::to_string(flaps));
}

Status BreakAlu(const EmulatedHardware& hw) { return Write(hw.alu, "wrong"); }

Status CorruptCompute(const EmulatedHardware& hw, const std::string& spec) {
  const std::string mode = spec.substr(0, spec.find(':'));
  if (mode != "nan" && mode != "drift") {
    return Status::InvalidArgument("sdc: mode '" + mode + "' is not nan or drift");
  }
  return Write(hw.sdc, spec);
}

Status SlowLink(const EmulatedHardware& hw, double factor) {
  if (!(factor > 1)) return Status::InvalidArgument("slow-link: factor " + std::to_string(factor) + " is not above 1");
  return Write(hw.link, std::to_string(factor));
}

Status SlowCompute(const EmulatedHardware& hw, double factor) {
  if (!(factor > 1)) return Status::InvalidArgument("slow: factor " + std::to_string(factor) + " is not above 1");
  return Write(hw.pace, std::to_string(factor));
}

Status Repair(const EmulatedHardware& hw) {
  Status first;
  for (const auto& [path, line] :
       {std::pair{hw.device, "ok"}, {hw.nic, "up"}, {hw.alu, "ok"}, {hw.link, "1"}, {hw.sdc, "ok"}, {hw.pace, "1"}}) {
    if (path.empty()) continue;  // a part not emulated here
    Status st = Write(path, line);
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

std::string DeviceError(const EmulatedHardware& hw) {
  const std::string s = FirstLine(hw.device);
  return s == "ok" ? "" : s;
}

bool NicUp(const EmulatedHardware& hw, int64_t now_ms) {
  const NicState n = ReadNic(hw);
  if (!n.down) return true;  // "up", or no file
  return n.until >= 0 && now_ms >= n.until;  // no end: down for good
}

uint64_t NicCarrierChanges(const EmulatedHardware& hw, int64_t now_ms) {
  // Each flap went down and comes up; the last one may not be up yet.
  const uint64_t changes = 2 * ReadNic(hw).flaps;
  return changes > 0 && !NicUp(hw, now_ms) ? changes - 1 : changes;
}

bool AluBroken(const EmulatedHardware& hw) { return FirstLine(hw.alu) == "wrong"; }

double LinkSlowdown(const EmulatedHardware& hw) {
  const double f = std::atof(FirstLine(hw.link).c_str());
  return f > 1 ? f : 1;
}

double ComputeSlowdown(const EmulatedHardware& hw) {
  const double f = std::atof(FirstLine(hw.pace).c_str());
  return f > 1 ? f : 1;
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace bulwark::cluster
