#include "agent/nvml.h"

#include <dlfcn.h>

#include <cstdlib>
#include <type_traits>

namespace bulwark::agent {
namespace {

// NVML's C ABI (nvml.h): opaque handles, int-sized enums, plain structs.
using Device = void*;    // nvmlDevice_t
using EventSet = void*;  // nvmlEventSet_t
constexpr int kMemoryErrorUncorrected = 1;            // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatileEcc = 0;                       // NVML_VOLATILE_ECC: since the driver loaded
constexpr unsigned long long kEventXidCritical = 0x8;  // nvmlEventTypeXidCriticalError

// nvmlEventData_t as of CUDA 11 (the layout nvmlEventSetWait_v2 fills).
struct EventData {
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the Xid for nvmlEventTypeXidCriticalError
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};

}  // namespace

struct Nvml::Api {
  int (*init)();
  int (*shutdown)();
  const char* (*error_string)(int);
  int (*count)(unsigned*);
  int (*handle)(unsigned, Device*);
  int (*total_ecc)(Device, int, int, unsigned long long*);
  int (*remapped)(Device, unsigned*, unsigned*, unsigned*, unsigned*);
  int (*throttle)(Device, unsigned long long*);
  int (*event_set_create)(EventSet*);
  int (*register_events)(Device, unsigned long long, EventSet);
  int (*event_set_wait)(EventSet, EventData*, unsigned);
  int (*event_set_free)(EventSet);
};

std::string Nvml::LibraryPath() {
  const char* env = std::getenv("BULWARK_NVML_LIB");
  return env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1";
}

Result<std::unique_ptr<Nvml>> Nvml::Load(const std::string& path) {
  std::unique_ptr<Nvml> n(new Nvml());
  n->path_ = path;
  // RTLD_LOCAL: NVML's symbols stay out of the agent's namespace.
  n->lib_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (n->lib_ == nullptr) {
    const char* why = ::dlerror();
    return Status::NotFound("NVML " + path + " cannot be loaded (" + (why ? why : "?") +
                            "; no NVIDIA driver here? else set BULWARK_NVML_LIB to its libnvidia-ml.so.1)");
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  int missing_more = 0;
  auto sym = [&](auto& fn, const char* name, const char* alt = nullptr) {
    void* p = ::dlsym(n->lib_, name);
    if (p == nullptr && alt != nullptr) p = ::dlsym(n->lib_, alt);
    if (p == nullptr && missing.empty()) missing = name;
    else if (p == nullptr) ++missing_more;
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  sym(api->init, "nvmlInit_v2");
  sym(api->shutdown, "nvmlShutdown");
  sym(api->error_string, "nvmlErrorString");
  sym(api->count, "nvmlDeviceGetCount_v2");
  sym(api->handle, "nvmlDeviceGetHandleByIndex_v2");
  sym(api->total_ecc, "nvmlDeviceGetTotalEccErrors");
  sym(api->remapped, "nvmlDeviceGetRemappedRows");
  // CUDA 12.2 renamed "throttle" to "clocks event"; drivers export both for now.
  sym(api->throttle, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons");
  sym(api->event_set_create, "nvmlEventSetCreate");
  sym(api->register_events, "nvmlDeviceRegisterEvents");
  sym(api->event_set_wait, "nvmlEventSetWait_v2");
  sym(api->event_set_free, "nvmlEventSetFree");
  if (!missing.empty()) {
    return Status::InvalidArgument(
        "NVML " + path + " lacks " + missing +
        (missing_more > 0 ? " and " + std::to_string(missing_more) + " more entry points" : std::string()) +
        ": not an NVML library, or a driver older than CUDA 11's; point BULWARK_NVML_LIB at the driver's "
        "libnvidia-ml.so.1");
  }
  n->api_ = std::move(api);
  if (int rc = n->api_->init(); rc != kNvmlSuccess) {
    n->api_->shutdown = nullptr;  // nothing to shut down
    return Status::Unavailable("NVML " + path + ": nvmlInit_v2 failed: " + n->Describe(rc) +
                               " (is the NVIDIA driver loaded?)");
  }
  unsigned count = 0;
  if (int rc = n->api_->count(&count); rc != kNvmlSuccess) {
    return Status::Unavailable("NVML " + path + ": nvmlDeviceGetCount_v2 failed: " + n->Describe(rc));
  }
  for (unsigned i = 0; i < count; ++i) {
    Device d = nullptr;
    // A GPU lost already keeps its slot (null): its checks answer "lost".
    if (n->api_->handle(i, &d) != kNvmlSuccess) d = nullptr;
    n->devices_.push_back(d);
  }
  n->gpus_ = count;
  return n;
}

Nvml::~Nvml() {
  if (api_ && events_ != nullptr) api_->event_set_free(events_);
  if (api_ && api_->shutdown != nullptr) api_->shutdown();
  if (lib_ != nullptr) ::dlclose(lib_);
}

std::string Nvml::Describe(int code) const {
  const char* s = api_ ? api_->error_string(code) : nullptr;
  return (s != nullptr ? std::string(s) : "NVML error") + " (" + std::to_string(code) + ")";
}

int Nvml::UncorrectedEcc(unsigned gpu, unsigned long long* count) const {
  if (gpu >= gpus_ || devices_[gpu] == nullptr) return kNvmlGpuIsLost;
  return api_->total_ecc(devices_[gpu], kMemoryErrorUncorrected, kVolatileEcc, count);
}

int Nvml::Remapped(unsigned gpu, RemappedRows* rows) const {
  if (gpu >= gpus_ || devices_[gpu] == nullptr) return kNvmlGpuIsLost;
  unsigned corr = 0, unc = 0, pending = 0, failed = 0;
  const int rc = api_->remapped(devices_[gpu], &corr, &unc, &pending, &failed);
  *rows = {corr, unc, pending != 0, failed != 0};
  return rc;
}

int Nvml::ThrottleReasons(unsigned gpu, unsigned long long* reasons) const {
  if (gpu >= gpus_ || devices_[gpu] == nullptr) return kNvmlGpuIsLost;
  return api_->throttle(devices_[gpu], reasons);
}

int Nvml::WatchXids() {
  if (events_ != nullptr) return kNvmlSuccess;
  if (int rc = api_->event_set_create(&events_); rc != kNvmlSuccess) {
    events_ = nullptr;
    return rc;
  }
  for (Device d : devices_) {
    if (d != nullptr) api_->register_events(d, kEventXidCritical, events_);
  }
  return kNvmlSuccess;
}

int Nvml::WaitXid(unsigned timeout_ms, XidEvent* event) {
  if (events_ == nullptr) return kNvmlNotSupported;
  EventData data{};
  const int rc = api_->event_set_wait(events_, &data, timeout_ms);
  if (rc != kNvmlSuccess) return rc;
  event->xid = data.event_data;
  event->gpu = 0;
  for (unsigned i = 0; i < gpus_; ++i) {
    if (devices_[i] == data.device) event->gpu = i;
  }
  return kNvmlSuccess;
}

}  // namespace bulwark::agent
