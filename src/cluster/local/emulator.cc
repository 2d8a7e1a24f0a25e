#include "cluster/local/emulator.h"

#include "cluster/local/emulated_hardware.h"
#include "cluster/local/local_cluster.h"
#include "common/files.h"

namespace bulwark::cluster {
namespace {

bool HoldsDevice(pid_t pid) {
  Result<std::string> env = ReadFile("/proc/" + std::to_string(pid) + "/environ");
  if (!env.ok()) return false;  // gone meanwhile
  // NUL-separated NAME=value entries.
  const std::string key("\0BULWARK_SDC_FILE=", 18);
  return (std::string(1, '\0') + *env).find(key) != std::string::npos;
}

}  // namespace

std::set<pid_t> ComputingProcesses(const Layout& layout, const std::string& id) {
  Result<pid_t> agent = LivePid(layout.agent_pid(id));
  if (!agent.ok()) return {};
  const std::map<pid_t, std::vector<pid_t>> children = ChildrenByParent();
  std::set<pid_t> out;
  // The agent's own helpers are not slowed; a process that holds the
  // device is, with everything under it (a Python rank's loader workers).
  std::vector<pid_t> look = {*agent};
  while (!look.empty()) {
    const pid_t p = look.back();
    look.pop_back();
    auto it = children.find(p);
    if (it == children.end()) continue;
    for (pid_t c : it->second) {
      if (HoldsDevice(c)) {
        for (pid_t d : ProcessTree(c, children)) out.insert(d);
      } else {
        look.push_back(c);
      }
    }
  }
  return out;
}

Emulator::Emulator(Layout layout) : layout_(std::move(layout)) {
  for (const std::string& id : ListDir(layout_.machines())) {
    const double f = ComputeSlowdown(HardwareOf(layout_.dir, id));
    if (f > 1) Slow(id, f);
  }
}

Emulator::~Emulator() {
  std::lock_guard<std::mutex> lock(mu_);
  slow_.clear();
}

bool Emulator::Makes(const std::string& fault) {
  return fault == "device-fail" || fault == "compute-fail" || fault == "nic-flap" || fault == "slow-link" ||
         fault == "sdc" || fault == "slow";
}

Status Emulator::Inject(const std::string& machine, const std::string& fault, double factor,
                        const std::string& where) {
  const EmulatedHardware hw = HardwareOf(layout_.dir, machine);
  if (fault == "device-fail") return FailDevice(hw);
  if (fault == "nic-flap") return FlapNic(hw, kNicFlapDown, UnixMs());
  if (fault == "slow-link") return SlowLink(hw, factor > 1 ? factor : 10);
  if (fault == "compute-fail") {
    // A broken ALU also turns the machine's matmuls NaN (trainer/diag/sdc.h).
    BULWARK_RETURN_IF_ERROR(BreakAlu(hw));
    return CorruptCompute(hw, "nan:1.000000");
  }
  if (fault == "sdc") {
    return CorruptCompute(hw, (where.empty() ? std::string("nan") : where) + ":" + std::to_string(factor > 0 ? factor : 1.0));
  }
  if (fault == "slow") {
    BULWARK_RETURN_IF_ERROR(SlowCompute(hw, factor));
    Slow(machine, factor);
    return Status::OK();
  }
  return Status::InvalidArgument("the emulated hardware has no fault '" + fault + "'");
}

void Emulator::Slow(const std::string& machine, double factor) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<SlowInjector>& s = slow_[machine];
  if (!s) {
    s = std::make_unique<SlowInjector>([layout = layout_, machine] { return ComputingProcesses(layout, machine); });
  }
  s->Start(factor);
}

Status Emulator::Repair(const std::string& machine) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    slow_.erase(machine);  // its destructor resumes the processes
  }
  return cluster::Repair(HardwareOf(layout_.dir, machine));
}

}  // namespace bulwark::cluster
