#include "dit/DitLayers.h"

#include <torch/autograd.h>

#include <cmath>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "dit/DitKernels.h"
#include "nn/Attention.h"

namespace strata::dit {

RmsNormImpl::RmsNormImpl(int64_t dim, const BuildOptions& options, double normEps) : eps(normEps) {
  weight = register_parameter("weight", at::ones({dim}, at::TensorOptions(options.device).dtype(options.dtype)));
}

namespace {

// diffusers' RMSNorm arithmetic: x * rsqrt(mean(x^2) + eps) in float32, then (for a
// half-precision weight) rounded to the weight's dtype and scaled by it.
at::Tensor rmsNormValue(const at::Tensor& x, const at::Tensor& rstd, const at::Tensor& weight) {
  const auto y = x * rstd;  // float32
  if (weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16)
    return y.to(weight.scalar_type()) * weight;
  return (y * weight).to(x.scalar_type());
}

// The same forward for a frozen weight, keeping only x (its dtype) and rstd [..., 1]
// for the backward. Plain autograd keeps a float32 copy of x as well (for pow):
// 4 more bytes per element of every q and k, ~6 GB over FLUX.1-dev at 1024 px
// without checkpointing.
struct FrozenRmsNorm : torch::autograd::Function<FrozenRmsNorm> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps) {
    const auto rstd = at::rsqrt(x.to(at::kFloat).pow(2).mean(-1, /*keepdim=*/true) + eps);  // [..., 1]
    ctx->save_for_backward({x, rstd, weight});
    return rmsNormValue(x, rstd, weight);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradOut) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& rstd = saved[1];
    const auto& weight = saved[2];
    const auto n = x.to(at::kFloat) * rstd;                             // normalised x, float32
    const auto gn = gradOut[0].to(at::kFloat) * weight.to(at::kFloat);  // d loss / d n
    // d/dx of x * rstd(x): rstd * (gn - n * mean(gn * n)).
    const auto gx = rstd * (gn - n * (gn * n).mean(-1, /*keepdim=*/true));  // float32
    return {gx.to(x.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor RmsNormImpl::forward(const at::Tensor& x) {
  if (at::GradMode::is_enabled() && x.requires_grad() && !weight.requires_grad())
    return FrozenRmsNorm::apply(x, weight, eps);
  const auto rstd = at::rsqrt(x.to(at::kFloat).pow(2).mean(-1, /*keepdim=*/true) + eps);
  return rmsNormValue(x, rstd, weight);
}

std::array<at::Tensor, 3> projectQkv(const QkvProjections& p, const at::Tensor& x) {
  // One input: the LoRA downs of q, k and v run as one matmul (nn::forwardSiblings).
  const auto out = nn::forwardSiblings({p.q.ptr().get(), p.k.ptr().get(), p.v.ptr().get()}, x);
  return {out[0], out[1], out[2]};
}

namespace {

std::vector<at::Tensor> narrowParts(const at::Tensor& x, int64_t dim, const std::vector<int64_t>& sizes) {
  std::vector<at::Tensor> parts;
  int64_t offset = 0;
  for (const int64_t n : sizes) {
    parts.push_back(x.narrow(dim, offset, n));
    offset += n;
  }
  return parts;
}

at::Tensor swigluValue(const at::Tensor& x) {
  if (nn::fusedPaths() && swigluFits(x)) return swigluForwardCuda(x);
  const int64_t m = x.size(-1) / 2;
  return at::silu(x.narrow(-1, 0, m)) * x.narrow(-1, m, m);
}

struct SplitAlong : torch::autograd::Function<SplitAlong> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, int64_t dim,
                                                std::vector<int64_t> sizes) {
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["shape"] = x.sizes().vec();
    ctx->saved_data["sizes"] = sizes;
    return narrowParts(x, dim, sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const auto shape = ctx->saved_data["shape"].toIntVector();
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    at::TensorOptions options;
    for (const auto& g : grads)
      if (g.defined()) options = g.options();
    std::vector<at::Tensor> parts;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined()) {
        parts.push_back(grads[i]);
      } else {
        auto partShape = shape;
        partShape[dim] = sizes[i];
        parts.push_back(at::zeros(partShape, options));  // a part nothing used
      }
    }
    return {at::cat(parts, dim), at::Tensor(), at::Tensor()};
  }
};

// d loss / d x of silu(gate) * up written into gx (x's shape; any strides) from g = d loss / d out.
void swigluBackwardInto(at::Tensor gx, const at::Tensor& g, const at::Tensor& x) {
  const int64_t m = x.size(-1) / 2;
  const auto gate = x.narrow(-1, 0, m);
  const auto up = x.narrow(-1, m, m);
  auto gxGate = gx.narrow(-1, 0, m);
  auto gxUp = gx.narrow(-1, m, m);
  at::mul_out(gxUp, g, at::silu(gate));                 // d up = g * silu(gate)
  at::silu_backward_out(gxGate, at::mul(g, up), gate);  // d gate = silu'(gate) * g * up
}

struct SwiGlu : torch::autograd::Function<SwiGlu> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return swigluValue(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradOut) {
    const auto x = ctx->get_saved_variables()[0];
    auto gx = at::empty(x.sizes(), x.options());  // contiguous
    if (nn::fusedPaths() && swigluFits(x))
      swigluBackwardCudaInto(gx, gradOut[0], x);
    else
      swigluBackwardInto(gx, gradOut[0], x);
    return {gx};
  }
};

// Whether view `v` hands its gradient to `base` (its narrow's node leads to base's
// gradient edge): not so for views a custom Function returned (a checkpoint's outputs),
// whose base autograd never reaches through them.
bool gradientReaches(const at::Tensor& v, const at::Tensor& base) {
  const auto& fn = v.grad_fn();
  if (!fn || fn->num_outputs() != 1 || fn->next_edges().empty()) return false;
  const auto edge = torch::autograd::impl::gradient_edge(base);
  const auto& next = fn->next_edge(0);
  return next.function == edge.function && next.input_nr == edge.input_nr;
}

}  // namespace

at::Tensor joinedTokens(const at::Tensor& txt, const at::Tensor& img) {
  if (nn::fusedPaths() && txt.dim() == 3 && img.dim() == 3 && txt.is_view() && img.is_view()) {
    const at::Tensor base(txt._base());  // a TensorBase in some LibTorch versions
    const bool halves = base.is_same(img._base()) && base.dim() == 3 && base.is_contiguous() &&
                        base.scalar_type() == txt.scalar_type() && base.scalar_type() == img.scalar_type() &&
                        base.size(0) == txt.size(0) && base.size(0) == img.size(0) && base.size(2) == txt.size(2) &&
                        base.size(2) == img.size(2) && base.size(1) == txt.size(1) + img.size(1) &&
                        txt.strides() == base.strides() && img.strides() == base.strides() &&
                        txt.storage_offset() == base.storage_offset() &&
                        img.storage_offset() == base.storage_offset() + txt.size(1) * base.stride(1);
    const bool tracked = txt.requires_grad() || img.requires_grad() || base.requires_grad();
    if (halves && (!tracked || (base.requires_grad() && gradientReaches(txt, base) && gradientReaches(img, base))))
      return base;
  }
  return at::cat({txt, img}, 1);
}

at::Tensor normModulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps) {
  if (nn::fusedPaths() && normModulateFits(x, shift, scale)) return normModulateCuda(x, shift, scale, eps);
  return modulate(layerNorm(x, eps), shift, scale);
}

std::vector<at::Tensor> splitAlong(const at::Tensor& x, int64_t dim, const std::vector<int64_t>& sizes) {
  int64_t total = 0;
  for (const int64_t n : sizes) total += n;
  if (dim < 0) dim += x.dim();
  if (dim < 0 || dim >= x.dim() || total != x.size(dim))
    throw Error("splitAlong: parts of " + std::to_string(total) + " along dim " + std::to_string(dim) + " of a " +
                std::to_string(x.dim()) + "-d tensor");
  if (!at::GradMode::is_enabled() || !x.requires_grad()) return narrowParts(x, dim, sizes);
  return SplitAlong::apply(x, dim, sizes);
}

at::Tensor swiglu(const at::Tensor& x) {
  if (x.size(-1) % 2 != 0)
    throw Error("swiglu: the last dim (" + std::to_string(x.size(-1)) + ") is not a (gate, up) pair");
  if (at::GradMode::is_enabled() && x.requires_grad()) return SwiGlu::apply(x);
  return swigluValue(x);
}

at::Tensor applyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // x: [B, N, H, Dh]; pairs (x0, x1) rotate to (-x1, x0).
  const auto pairs = x.unflatten(-1, {x.size(-1) / 2, 2});  // [B, N, H, Dh/2, 2]
  const auto real = pairs.select(-1, 0);
  const auto imag = pairs.select(-1, 1);
  const auto rotated = at::stack({-imag, real}, -1).flatten(-2);  // [B, N, H, Dh]
  const auto c = cos.unsqueeze(0).unsqueeze(2);                   // [1, N, 1, Dh]
  const auto s = sin.unsqueeze(0).unsqueeze(2);
  return (x.to(at::kFloat) * c + rotated.to(at::kFloat) * s).to(x.scalar_type());
}

at::Tensor normThenRotary(RmsNormImpl& norm, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                          int64_t offset) {
  const auto c = cos.narrow(0, offset, x.size(1));  // [N, Dh]
  const auto s = sin.narrow(0, offset, x.size(1));
  if (normRopeFits(x, norm.weight, c, s)) return normRope(x, norm.weight, c, s, norm.eps);
  return applyRotary(norm.forward(x), c, s);
}

at::Tensor jointAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  // The kernel (cuDNN or flash on CUDA) is model.attention_backend's (nn/Attention.h),
  // which also hands its backward the output's gradient in the output's layout.
  // [B, N, H, Dh] -> [B, H, N, Dh] for the fused kernel, and back.
  const auto out = nn::attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));  // [B, H, N, Dh]
  return out.transpose(1, 2).flatten(2);                                                    // [B, N, H*Dh]
}

std::pair<at::Tensor, at::Tensor> DoubleAttention::forward(const at::Tensor& imgNorm, const at::Tensor& txtNorm,
                                                           const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t nTxt = txtNorm.size(1);
  auto [q, k, v] = projectQkv(imgQkv, imgNorm);
  auto [tq, tk, tv] = projectQkv(txtQkv, txtNorm);
  // [B, N, H, Dh], text first; the rotary tables cover [text; image] tokens.
  const auto query = at::cat({normThenRotary(*normAddedQ, splitHeads(tq, heads), cos, sin, 0),
                              normThenRotary(*normQ, splitHeads(q, heads), cos, sin, nTxt)},
                             1);
  const auto key = at::cat({normThenRotary(*normAddedK, splitHeads(tk, heads), cos, sin, 0),
                            normThenRotary(*normK, splitHeads(k, heads), cos, sin, nTxt)},
                           1);
  const auto value = at::cat({splitHeads(tv, heads), splitHeads(v, heads)}, 1);
  const auto attn = jointAttention(query, key, value);                    // [B, Nt+Ni, D]
  const auto streams = splitAlong(attn, 1, {nTxt, attn.size(1) - nTxt});  // text, image
  const auto txtAttn = toAddOut->forward(streams[0]);
  const auto imgAttn = toOut->forward(streams[1]);
  return {imgAttn, txtAttn};
}

std::pair<at::Tensor, at::Tensor> rotaryFromIds(const at::Tensor& idsIn, const std::vector<int64_t>& axesDims,
                                                double theta) {
  const at::Tensor ids = idsIn.dim() == 3 ? idsIn[0] : idsIn;  // [N, n_axes]
  if (ids.dim() != 2 || ids.size(1) != static_cast<int64_t>(axesDims.size()))
    throw Error("DiT rotary: position ids must be [N, " + std::to_string(axesDims.size()) + "], got " +
                std::to_string(ids.dim()) + "-d with last dim " + std::to_string(ids.size(-1)));
  const auto pos = ids.to(at::kFloat).to(at::kDouble);
  std::vector<at::Tensor> cosParts, sinParts;
  for (size_t axis = 0; axis < axesDims.size(); ++axis) {
    const int64_t dim = axesDims[axis];
    const auto exponents = at::arange(0, dim, 2, pos.options()) / static_cast<double>(dim);
    const auto freqs = 1.0 / at::pow(theta, exponents);                               // [dim/2]
    const auto angles = at::outer(pos.select(1, static_cast<int64_t>(axis)), freqs);  // [N, dim/2]
    cosParts.push_back(angles.cos().repeat_interleave(2, 1));                         // [N, dim]
    sinParts.push_back(angles.sin().repeat_interleave(2, 1));
  }
  return {at::cat(cosParts, -1).to(at::kFloat), at::cat(sinParts, -1).to(at::kFloat)};  // [N, Dh]
}

at::Tensor timestepSinusoid(const at::Tensor& t, int64_t channels) {
  const int64_t half = channels / 2;
  const auto exponent =
      at::arange(0, half, t.options().dtype(at::kFloat)) * (-std::log(10000.0) / static_cast<double>(half));
  const auto angles = t.to(at::kFloat).unsqueeze(1) * at::exp(exponent).unsqueeze(0);  // [B, half]
  return at::cat({angles.cos(), angles.sin()}, -1);  // [B, channels], cos first (flip_sin_to_cos)
}

std::pair<at::Tensor, at::Tensor> jointRotary(const at::Tensor& txtIdsIn, const at::Tensor& imgIdsIn,
                                              const std::vector<int64_t>& axesDims, double theta) {
  const auto txtIds = txtIdsIn.dim() == 3 ? txtIdsIn[0] : txtIdsIn;                                   // [Nt, n_axes]
  const auto imgIds = imgIdsIn.dim() == 3 ? imgIdsIn[0] : imgIdsIn;                                   // [Ni, n_axes]
  return rotaryFromIds(at::cat({txtIds.to(at::kFloat), imgIds.to(at::kFloat)}, 0), axesDims, theta);  // [Nt+Ni, Dh]
}

namespace {

// linear_2(silu(linear_1(sinusoid(x * 1000)))): x [B] or a scalar -> [B, D].
at::Tensor embedScalar(nn::LinearImpl& linear1, nn::LinearImpl& linear2, const at::Tensor& x, int64_t batch,
                       int64_t channels, at::ScalarType dt) {
  const auto perSample = x.dim() == 0 ? x.reshape({1}).expand({batch}) : x.reshape({-1});  // [B]
  const auto t = perSample.to(at::kFloat) * 1000;
  return linear2.forward(at::silu(linear1.forward(timestepSinusoid(t, channels).to(dt))));  // [B, D]
}

}  // namespace

at::Tensor ScalarEmbedders::forward(const at::Tensor& timestep, const at::Tensor& guidance, int64_t batch,
                                    int64_t channels, at::ScalarType dt) {
  auto temb = embedScalar(*timeLinear1, *timeLinear2, timestep, batch, channels, dt);
  if (guidanceLinear1) temb = temb + embedScalar(*guidanceLinear1, *guidanceLinear2, guidance, batch, channels, dt);
  return temb;  // [B, D]
}

}  // namespace strata::dit
