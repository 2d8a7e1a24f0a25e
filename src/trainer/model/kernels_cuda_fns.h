// The fused CUDA kernels (kernels_cuda.cu) as libtorch autograd Functions,
// for CUDA tensors: what kernels.h's RmsNorm, SwiGluPacked, QkvHeads and CrossEntropy run
// on a CUDA rank when the build has them (BULWARK_CUDA_KERNELS, defined by
// src/trainer/CMakeLists.txt when it finds a CUDA compiler) and Enabled().
// Same signatures, types in and out and gradients as kernels.h's; values
// within rounding of kernels::eager's (tests/gpu/cuda_kernels_check.cc
// compares them), every result bitwise repeatable.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace bulwark::trainer::kernels::cuda {

// True when built with the kernels and the environment variable
// BULWARK_CUDA_KERNELS is not "0" (read once): =0 runs the eager ops
// instead, to compare or to rule the kernels out.
bool Enabled();

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                      c10::optional<torch::ScalarType> out = c10::nullopt);
torch::Tensor SwiGluPacked(const torch::Tensor& gate_up);
std::vector<torch::Tensor> QkvHeads(const torch::Tensor& qkv, int64_t heads, const torch::Tensor& cos,
                                    const torch::Tensor& sin);
torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace bulwark::trainer::kernels::cuda
