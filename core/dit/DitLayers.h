#pragma once
// The layers FLUX.1 and FLUX.2 share: the build options, RMSNorm, the q/k/v
// projections, rotary embedding (and the fused norm + rotary kernel), the joint
// attention of a double block, rotary tables from position ids and the timestep
// sinusoid. A model's blocks are made of these; neither model has its own copy.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <array>
#include <functional>
#include <utility>
#include <vector>

#include "dit/DitOps.h"
#include "nn/Linear.h"

namespace strata::dit {

// Where and in which dtype a model is built. Parameters are created there
// directly (one Linear at a time), so a FLUX.1-dev model never exists whole on
// the CPU when built for a GPU.
struct BuildOptions {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
  // Called with each double / single block right after it is built, before the
  // next one exists: where weights are quantized block by block, so the whole
  // model is never held in `dtype` at once.
  std::function<void(torch::nn::Module& block)> onBlockBuilt;
  // The device of block i (double blocks first, then single) when blocks do not
  // all live on `device`: each is built where placement will keep it, so a split
  // model is never whole on one device. Empty: every block on `device`.
  std::function<at::Device(size_t blockIndex)> blockDevice;
};

// The sinusoid width of the timestep and guidance embedders (FLUX.1; FLUX.2's config default).
inline constexpr int64_t kTimestepChannels = 256;

// RMSNorm over the last dim with a learned scale "weight" (diffusers RMSNorm; FLUX.1 eps 1e-6,
// FLUX.2 takes its config's eps).
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, const BuildOptions& options, double normEps = kNormEps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;  // [dim]
  double eps;
};
TORCH_MODULE(RmsNorm);

// The three projections of one attention stream. `projectQkv` is the one place
// q, k and v are computed, so fusing the base weights into one matmul later
// (LoRA deltas still added per projection) changes only that function.
struct QkvProjections {
  nn::Linear q{nullptr};
  nn::Linear k{nullptr};
  nn::Linear v{nullptr};
};
std::array<at::Tensor, 3> projectQkv(const QkvProjections& p, const at::Tensor& x);

// x cut along `dim` into consecutive parts of `sizes` (summing to x.size(dim)): the
// parts are views of x, as narrow gives them, but their gradients meet in one
// concatenation instead of autograd's zero-filled full-size tensor per part, summed:
// FLUX.2's fused qkv + MLP projection is 36864 wide, and four narrows of it cost four
// fills and three full-size sums per block in the backward.
std::vector<at::Tensor> splitAlong(const at::Tensor& x, int64_t dim, const std::vector<int64_t>& sizes);

// SwiGLU over a fused (gate, up) projection (FLUX.2's MLPs): x [..., 2M] ->
// silu(gate) * up [..., M]. The same values and gradients as the two ATen ops; the
// backward writes both halves' gradients into one tensor and keeps only x.
at::Tensor swiglu(const at::Tensor& x);

// Rotary embedding applied to q or k: x [B, N, H, Dh], cos/sin [N, Dh] (interleaved pairs).
at::Tensor applyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// applyRotary(norm(x)) over the tokens [offset, offset + N) of the joint rotary tables
// cos/sin [Ntotal, Dh]: x [B, N, H, Dh], norm at its own eps. One CUDA kernel where the
// build has it and the tensors fit (bf16 on CUDA, frozen norm weight), else the ATen ops.
at::Tensor normThenRotary(RmsNormImpl& norm, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                          int64_t offset);

// Joint attention: q, k, v [B, N, H, Dh] -> [B, N, H * Dh] (scaled dot product; the
// backend is the process's choice, model.attention_backend).
at::Tensor jointAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// A double block's attention modules, named alike in FLUX.1 and FLUX.2 (under "attn.";
// dit::UnitBuilder::doubleAttention picks them from a block's layout).
struct DoubleAttention {
  QkvProjections imgQkv;  // attn.to_q / to_k / to_v
  QkvProjections txtQkv;  // attn.add_q_proj / add_k_proj / add_v_proj
  RmsNorm normQ{nullptr}, normK{nullptr}, normAddedQ{nullptr}, normAddedK{nullptr};
  nn::Linear toOut{nullptr};     // attn.to_out.0
  nn::Linear toAddOut{nullptr};  // attn.to_add_out
  int64_t heads = 0;

  // The joint attention from the streams' modulated norms imgNorm [B, Ni, D] and
  // txtNorm [B, Nt, D]: q, k, v of each stream (projectQkv), RMSNorm + rotary of q and
  // k, one attention over [text; image] (the rotary tables' order), each stream's
  // output Linear. -> {image [B, Ni, D], text [B, Nt, D]}.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& imgNorm, const at::Tensor& txtNorm, const at::Tensor& cos,
                                            const at::Tensor& sin);
};

// The MLP Linears of a double block's two streams: ff.<in> / ff.<out> (image) and
// ff_context.<in> / ff_context.<out> (text); dit::UnitBuilder::streamMlps picks them.
struct StreamMlps {
  nn::Linear ffIn{nullptr};
  nn::Linear ffOut{nullptr};
  nn::Linear ffContextIn{nullptr};
  nn::Linear ffContextOut{nullptr};
};

// Rotary cos/sin [N, Dh] (float32) from position ids [N, n_axes] (or [B, N, n_axes],
// first batch used, as diffusers does).
std::pair<at::Tensor, at::Tensor> rotaryFromIds(const at::Tensor& ids, const std::vector<int64_t>& axesDims,
                                                double theta);

// Rotary tables over [text; image] from their ids ([N, n_axes] or [B, N, n_axes]):
// cos/sin [Nt + Ni, Dh].
std::pair<at::Tensor, at::Tensor> jointRotary(const at::Tensor& txtIds, const at::Tensor& imgIds,
                                              const std::vector<int64_t>& axesDims, double theta);

// Sinusoidal embedding of t [B] (already x1000): [B, channels] float32, cos first.
at::Tensor timestepSinusoid(const at::Tensor& t, int64_t channels = kTimestepChannels);

// The timestep embedder and, where the model embeds guidance, the guidance embedder:
// each linear_2(silu(linear_1(sinusoid(x * 1000)))) with the sinusoid in float32 (diffusers
// rounds t to the model dtype first; in bf16 that moves t = 0.37 to 368, a different
// embedding, equal in fp32), cast to the Linears' dtype. dit::UnitBuilder::scalarEmbedders
// picks them ("<prefix>.timestep_embedder.linear_1" ...).
struct ScalarEmbedders {
  nn::Linear timeLinear1{nullptr}, timeLinear2{nullptr};
  nn::Linear guidanceLinear1{nullptr}, guidanceLinear2{nullptr};  // null without guidance

  // timestep (and guidance) [B] or scalars -> their embeddings' sum [B, D] in `dt`.
  at::Tensor forward(const at::Tensor& timestep, const at::Tensor& guidance, int64_t batch, int64_t channels,
                     at::ScalarType dt);
};

}  // namespace strata::dit
