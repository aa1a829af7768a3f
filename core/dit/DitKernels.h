#pragma once
// Fused CUDA paths of the DiT layers (FLUX.1 and FLUX.2), used where the build has
// them (CMake found a CUDA compiler and LibTorch has CUDA: STRATA_DIT_CUDA_KERNELS) and
// the tensors fit; everywhere else the layers run their plain ATen code, which is also
// the reference the fused paths are tested against (tests/gpu/test_flux_kernels_gpu.cpp).
#include <ATen/ATen.h>

namespace strata::dit {

// Whether this build has the CUDA kernels.
bool ditCudaKernelsBuilt();

// Whether normRope can take these: x [B, N, H, Dh] bf16 CUDA with each token's heads
// side by side and tokens evenly spaced (contiguous, or a narrow of a wider
// projection's last dim, as FLUX.2's single blocks split q and k off), a frozen
// bf16 weight [Dh] and float32 cos/sin [N, Dh] on x's device, Dh even and small enough.
bool normRopeFits(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos, const at::Tensor& sin);

// applyRotary(rmsNorm(x) * weight, cos, sin) in one pass (and one in the backward),
// with the unfused path's roundings; keeps x and rstd [B*N*H] for the backward, as
// the unfused frozen norm does. Gradient only for x (the weight is frozen).
// x [B, N, H, Dh] -> [B, N, H, Dh]. Call only where normRopeFits.
at::Tensor normRope(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& cos, const at::Tensor& sin,
                    double eps);

// Whether normModulate can take x [B, N, D] and shift, scale [B, D]: all bf16 on one
// CUDA device, D a multiple of 8 and at most the kernels' width (8192), each last dim
// contiguous, the other strides and each start a multiple of 8 values (x's tokens may be
// a narrow of a longer sequence, as FLUX's double blocks take the text and image halves
// of one tensor; shift and scale chunks of one modulation vector).
bool normModulateFits(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale);

// layerNorm(x) * (1 + scale) + shift (FLUX's norm1 / norm2 / norm_out with their
// modulation) in one pass, and one in the backward, with the unfused path's roundings;
// keeps x, scale and mean, rstd [B*N] for the backward, where the unfused path also
// keeps the normalised x when scale is trained. Gradients for x, shift and scale.
// x [B, N, D] -> [B, N, D] contiguous. Call only where normModulateFits.
at::Tensor normModulateCuda(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps);

// Whether the SwiGLU kernels can take x [..., 2M]: bf16 CUDA, M even, the last dim
// contiguous and rows evenly spaced (contiguous, or a narrow of a wider projection's
// last dim, as FLUX.2's single blocks take the MLP part of their fused projection).
bool swigluFits(const at::Tensor& x);

// silu(gate) * up over x = [gate | up] -> [..., M] contiguous, in one pass, with the
// ATen ops' roundings. No autograd: dit::swiglu wraps it. Call only where swigluFits.
at::Tensor swigluForwardCuda(const at::Tensor& x);

// The gradient of x for `g` [..., M] written into gx (x's shape, contiguous) in one
// pass, with ATen's roundings (mul, then silu_backward). Call only where swigluFits(x).
void swigluBackwardCudaInto(at::Tensor& gx, const at::Tensor& g, const at::Tensor& x);

}  // namespace strata::dit
