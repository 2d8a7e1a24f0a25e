#include "trainer/model/precision.h"

#include <sstream>

#include "common/files.h"

namespace bulwark::trainer {

CpuBf16 ParseCpuInfo(const std::string& cpuinfo) {
  CpuBf16 cpu;
  std::istringstream in(cpuinfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') == std::string::npos ? 0 : line.find(':') + 1));
    std::string w;
    while (words >> w) {
      if (w == "avx512_bf16") cpu.avx512_bf16 = true;
      if (w == "amx_bf16") cpu.amx_bf16 = true;
    }
    break;  // every core lists the same flags
  }
  return cpu;
}

CpuBf16 HostCpuBf16() {
  static const CpuBf16 cpu = [] {
    auto text = ReadFile("/proc/cpuinfo");
    return text.ok() ? ParseCpuInfo(*text) : CpuBf16{};
  }();
  return cpu;
}

Result<PrecisionChoice> ChoosePrecision(const std::string& requested, const CpuBf16& cpu) {
  if (requested == "bf16") return PrecisionChoice{true, "bf16 (--precision bf16)"};
  if (requested == "fp32") return PrecisionChoice{false, "fp32 (--precision fp32)"};
  if (requested != "auto") {
    return Status::InvalidArgument("--precision '" + requested + "' is not one of: auto, bf16, fp32");
  }
  if (cpu.amx_bf16) return PrecisionChoice{true, "bf16 (auto: the CPU has amx_bf16)"};
  if (cpu.avx512_bf16) return PrecisionChoice{true, "bf16 (auto: the CPU has avx512_bf16)"};
  return PrecisionChoice{false, "fp32 (auto: the CPU has neither avx512_bf16 nor amx_bf16)"};
}

}  // namespace bulwark::trainer
