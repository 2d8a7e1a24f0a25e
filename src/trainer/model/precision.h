// --precision: bf16 or fp32 compute, and the default taken from the CPU.
//
// bf16 pays only where the CPU multiplies bf16 natively (AVX-512 BF16 or
// AMX, which oneDNN uses): on this host a 2048x768x768 matmul runs about 4.8x
// faster in bf16 than in fp32. Elsewhere bf16 is emulated and slower than
// fp32, so "auto" picks fp32 there.
#pragma once

#include <string>

#include "common/status.h"

namespace bulwark::trainer {

struct CpuBf16 {
  bool avx512_bf16 = false;
  bool amx_bf16 = false;
};

// The flags of /proc/cpuinfo's text (pure, for tests).
CpuBf16 ParseCpuInfo(const std::string& cpuinfo);
// This machine's, read once.
CpuBf16 HostCpuBf16();

struct PrecisionChoice {
  bool bf16 = false;
  std::string reason;  // "bf16 (--precision)", "bf16 (auto: CPU has avx512_bf16)", ...
};

// `requested` is auto, bf16 or fp32; anything else is refused naming the choices.
Result<PrecisionChoice> ChoosePrecision(const std::string& requested, const CpuBf16& cpu);

}  // namespace bulwark::trainer
