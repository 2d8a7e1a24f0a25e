#include "agent/gpu_health.h"

#include <utility>
#include <vector>

namespace bulwark::agent {
namespace {

// Each of these means the GPU or its firmware failed and it needs a reset
// or service (NVIDIA's Xid catalog). Xids that usually come from the
// application (13 graphics engine exception, 31 memory page fault, 43
// stopped processing, 45 preemptive cleanup) are not here: the rank's own
// exit and log signatures judge those, and evicting machines for a user's
// bug would evict every machine in turn.
struct CriticalXid {
  unsigned long long xid;
  const char* name;
};
constexpr CriticalXid kCriticalXids[] = {
    {48, "double-bit ECC error"},
    {61, "internal micro-controller breakpoint"},
    {62, "internal micro-controller halt"},
    {63, "row remapping recorded, reset pending"},
    {64, "row remapping failed"},
    {74, "NVLink error"},
    {79, "fallen off the bus"},
    {92, "high single-bit ECC error rate"},
    {94, "contained ECC error"},
    {95, "uncontained ECC error"},
    {119, "GSP RPC timeout"},
    {120, "GSP error"},
    {140, "unrecovered ECC error"},
};

// Slowdowns that mean the hardware protects itself (heat, a power brake);
// a busy GPU running at its software power cap is normal and not a hint.
struct Slowdown {
  unsigned long long bit;
  const char* name;
};
constexpr Slowdown kSlowdowns[] = {
    {kThrottleHwSlowdown, "hardware slowdown"},
    {kThrottleSwThermal, "thermal (software)"},
    {kThrottleHwThermal, "thermal (hardware)"},
    {kThrottleHwPowerBrake, "power brake"},
};

constexpr unsigned kXidWaitMs = 250;

std::string Gpu(unsigned i) { return "GPU " + std::to_string(i); }

}  // namespace

const char* CriticalXidName(unsigned long long xid) {
  for (const CriticalXid& c : kCriticalXids) {
    if (c.xid == xid) return c.name;
  }
  return "";
}

std::unique_ptr<GpuHealth> GpuHealth::Open(const std::string& library, const Logger& log) {
  Result<std::unique_ptr<Nvml>> nvml = Nvml::Load(library);
  if (!nvml.ok()) {
    log("warning: " + nvml.status().message() + "; the device check reads the emulated device file");
    return nullptr;
  }
  log("NVML " + library + ": " + std::to_string((*nvml)->gpus()) + " GPU(s); the device check reads them");
  return std::make_unique<GpuHealth>(std::move(*nvml), log);
}

GpuHealth::GpuHealth(std::unique_ptr<Nvml> nvml, Logger log) : nvml_(std::move(nvml)), log_(std::move(log)) {
  Rebaseline();
  // Registered here, not on the thread: an Xid after construction is kept.
  if (int rc = nvml_->WatchXids(); rc != kNvmlSuccess) {
    log_("warning: NVML Xid events unavailable: " + nvml_->Describe(rc) + "; ECC, remaps and lost GPUs are still read");
    return;
  }
  xid_thread_ = std::thread([this] { WaitForXids(); });
}

GpuHealth::~GpuHealth() {
  stop_ = true;
  if (xid_thread_.joinable()) xid_thread_.join();
}

void GpuHealth::Rebaseline() {
  std::map<unsigned, unsigned long long> counts;
  for (unsigned i = 0; i < nvml_->gpus(); ++i) {
    unsigned long long n = 0;
    if (nvml_->UncorrectedEcc(i, &n) == kNvmlSuccess) counts[i] = n;
  }
  MutexLock lock(&mu_);
  ecc_baseline_ = std::move(counts);
  xid_.clear();
}

GpuVerdict GpuHealth::Read() {
  std::vector<std::string> failures, slow;
  std::map<unsigned, unsigned long long> baseline, xids;
  {
    MutexLock lock(&mu_);
    baseline = ecc_baseline_;
    xids = xid_;
  }
  for (unsigned i = 0; i < nvml_->gpus(); ++i) {
    // A lost GPU answers every query with GPU_IS_LOST; one line says it.
    auto lost = [&](int rc) {
      if (rc != kNvmlGpuIsLost) return false;
      failures.push_back(Gpu(i) + " is lost (fallen off the bus or hung): " + nvml_->Describe(rc));
      return true;
    };
    unsigned long long ecc = 0;
    const int ecc_rc = nvml_->UncorrectedEcc(i, &ecc);
    if (lost(ecc_rc)) continue;
    // NOT_SUPPORTED: ECC is off on this GPU; nothing to compare.
    if (ecc_rc == kNvmlSuccess) {
      auto b = baseline.find(i);
      if (b == baseline.end()) {
        // No count at start (ECC was off, the read failed): this first
        // count is the baseline, not a rise from 0.
        MutexLock lock(&mu_);
        ecc_baseline_.emplace(i, ecc);
        b = baseline.emplace(i, ecc).first;
      }
      const unsigned long long was = b->second;
      if (ecc > was) {
        failures.push_back(Gpu(i) + ": uncorrectable ECC errors rose " + std::to_string(was) + " -> " +
                           std::to_string(ecc));
      }
    }
    RemappedRows rows;
    const int remap_rc = nvml_->Remapped(i, &rows);
    if (lost(remap_rc)) continue;
    if (remap_rc == kNvmlSuccess && rows.failed) {
      failures.push_back(Gpu(i) + ": row remapping failed (" + std::to_string(rows.uncorrected) +
                         " uncorrectable rows; the GPU needs service)");
    } else if (remap_rc == kNvmlSuccess && rows.pending) {
      failures.push_back(Gpu(i) + ": a row remap is pending (" + std::to_string(rows.uncorrected) +
                         " uncorrectable rows; reset the GPU)");
    }
    if (auto x = xids.find(i); x != xids.end()) {
      failures.push_back(Gpu(i) + ": Xid " + std::to_string(x->second) + " (" + CriticalXidName(x->second) + ")");
    }
    unsigned long long reasons = 0;
    const int throttle_rc = nvml_->ThrottleReasons(i, &reasons);
    if (lost(throttle_rc)) continue;
    if (throttle_rc == kNvmlSuccess) {
      std::string why;
      for (const Slowdown& s : kSlowdowns) {
        if (reasons & s.bit) why += std::string(why.empty() ? "" : ", ") + s.name;
      }
      if (!why.empty()) slow.push_back(Gpu(i) + " slowed down: " + why);
    }
  }
  GpuVerdict v;
  for (const std::string& f : failures) v.detail += (v.detail.empty() ? "" : "; ") + f;
  for (const std::string& s : slow) v.slowdown += (v.slowdown.empty() ? "" : "; ") + s;
  v.ok = failures.empty();
  return v;
}

void GpuHealth::WaitForXids() {
  while (!stop_) {
    XidEvent e;
    const int rc = nvml_->WaitXid(kXidWaitMs, &e);
    if (rc == kNvmlTimeout) continue;
    if (rc != kNvmlSuccess) {
      // No events on this machine (unsupported, no permission, a lost GPU
      // that answers at once): the periodic reads still find lost GPUs and
      // ECC rises; waiting on would spin.
      log_("warning: NVML Xid events unavailable: " + nvml_->Describe(rc) + "; ECC, remaps and lost GPUs are still read");
      return;
    }
    const char* name = CriticalXidName(e.xid);
    if (*name == '\0') {
      log_(Gpu(e.gpu) + ": Xid " + std::to_string(e.xid) + " (not a hardware fault; left to the ranks' exits)");
      continue;
    }
    log_(Gpu(e.gpu) + ": Xid " + std::to_string(e.xid) + " (" + name + ")");
    MutexLock lock(&mu_);
    xid_.emplace(e.gpu, e.xid);  // the first one stays: it is the cause
  }
}

}  // namespace bulwark::agent
