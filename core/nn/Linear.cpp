#include "nn/Linear.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/init.h>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "nn/QuantKernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>

namespace strata::nn {

namespace {

std::atomic<bool>& fusedPathsFlag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("STRATA_FUSED_PATHS");
    return !(env && std::strcmp(env, "0") == 0);
  }()};
  return flag;
}

}  // namespace

bool fusedPaths() { return fusedPathsFlag().load(std::memory_order_relaxed); }
void setFusedPaths(bool on) { fusedPathsFlag().store(on, std::memory_order_relaxed); }

at::Tensor LinearAdapter::addWithBase(const std::vector<at::Tensor>&, int64_t, const at::Tensor&, const at::Tensor&,
                                      const at::Tensor&) {
  throw Error("nn::LinearAdapter: addWithBase on an adapter that takes no base gradient");
}

LinearImpl::LinearImpl(int64_t inFeatures, int64_t outFeatures, bool withBias, const at::TensorOptions& options)
    : inFeatures_(inFeatures), outFeatures_(outFeatures) {
  at::NoGradGuard noGrad;
  weight = register_parameter("weight", at::empty({outFeatures, inFeatures}, options));
  // Same init as torch.nn.Linear, so randomly built models behave like PyTorch's.
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (withBias) {
    const double bound = inFeatures > 0 ? 1.0 / std::sqrt(static_cast<double>(inFeatures)) : 0.0;
    bias = register_parameter("bias", at::empty({outFeatures}, options).uniform_(-bound, bound));
  }
}

namespace {

// How a quantized Linear multiplies (nn/Quantize.h).
enum MatmulMode : int64_t { kDequantized = 0, kFp8Forward = 1, kFp8ForwardAndBackward = 2 };

// 440 rather than 448 (e4m3fn's largest finite value): the scaled input is rounded
// to bf16 before the cast, and e4m3fn has no infinity (past 464 a value is NaN).
constexpr double kFp8Target = 440.0;
// The forward accumulates in the tensor cores' fast mode (what fp8 training recipes
// use for the forward); the input gradient's matmul does not: on the H200 the fast
// mode bought it nothing measurable (docs/quantization.md), so it keeps the exact sums.
constexpr bool kFastAccumForward = true;
constexpr bool kFastAccumInputGrad = false;

// The weight's scale as _scaled_mm's row-wise second scale: [1, n] float32. A
// per-tensor scale is repeated (_scaled_mm does not mix row-wise and per-tensor).
at::Tensor columnScale(const at::Tensor& scale, int64_t n) {
  return scale.numel() == 1 ? scale.reshape({1, 1}).expand({1, n}).contiguous() : scale.reshape({1, n});
}

// While forwardSiblings runs on this thread: the input its Linears share, quantized by
// the first fp8 one, so the others reuse it (per token: the same rows each would make).
// The entry is the tensor and its version at quantization: an in-place change since, or
// another tensor, quantizes anew. Cleared when forwardSiblings returns, so nothing is held
// past it.
struct SharedInputQuantization {
  at::Tensor x;
  int64_t version = -1;
  Fp8Rows q;
};
thread_local SharedInputQuantization* sharedInput = nullptr;

// x [..., K] quantized per token as [M, K], or the siblings' shared quantization of it.
// Inference tensors keep no version counter: they are not shared.
Fp8Rows quantizedInput(const at::Tensor& x, int64_t k) {
  SharedInputQuantization* shared = x.is_inference() ? nullptr : sharedInput;
  const int64_t version = shared ? static_cast<int64_t>(x._version()) : -1;
  if (shared && shared->x.is_same(x) && shared->version == version) return shared->q;
  auto q = quantizeRowsE4m3(x.reshape({-1, k}), at::Tensor(), kFp8Target);  // [M, K]
  if (shared) *shared = {x, version, q};
  return q;
}

// x [..., K] bf16 on CUDA times the fp8 weight [N, K] on the fp8 tensor cores, bias
// fused: [..., N]. W^T is W's storage read column-major, as _scaled_mm wants.
at::Tensor fp8Forward(const at::Tensor& x, const at::Tensor& weightQ, const at::Tensor& scale,
                      const c10::optional<at::Tensor>& bias) {
  const int64_t n = weightQ.size(0);
  const int64_t k = weightQ.size(1);
  const auto q = quantizedInput(x, k);  // [M, K]
  const auto y = compat::scaledMm(q.data, weightQ.t(), q.scale, columnScale(scale, n), bias.value_or(at::Tensor()),
                                  x.scalar_type(), kFastAccumForward);  // [M, N]
  auto shape = x.sizes().vec();
  shape.back() = n;
  // Not a view of y (no one else holds y): an adapter may then add into it in place.
  return at::_unsafe_view(y, shape);  // [..., N]
}

// The input gradient on the fp8 tensor cores: g [..., N] times the weight's scale,
// quantized per row, times W [N, K]. _scaled_mm's second operand must be column-major,
// so W is transposed into a [K, N] copy (1 byte per weight, freed after the matmul),
// unless the Linear keeps one (`keptT`, Fp8Backward::Fp8KeptTranspose).
at::Tensor fp8InputGrad(const at::Tensor& g, const at::Tensor& weightQ, const at::Tensor& scale,
                        const at::Tensor& keptT) {
  const int64_t n = weightQ.size(0);
  const int64_t k = weightQ.size(1);
  const bool perTensor = scale.numel() == 1;
  const auto q = quantizeRowsE4m3(g.reshape({-1, n}), perTensor ? at::Tensor() : scale, kFp8Target);  // [M, N]
  const auto wT = keptT.defined() ? keptT : transposedCopy(weightQ);                                  // [K, N]
  const auto sb = perTensor ? columnScale(scale, k) : at::ones({1, k}, scale.options());              // [1, K]
  const auto gx =
      compat::scaledMm(q.data, wT.t(), q.scale, sb, at::Tensor(), g.scalar_type(), kFastAccumInputGrad);  // [M, K]
  auto shape = g.sizes().vec();
  shape.back() = k;
  return gx.view(shape);  // [..., K]
}

// (x W_q^T) * scale (+ bias) over a quantized weight, without autograd.
at::Tensor quantizedForward(const at::Tensor& x, const at::Tensor& weightQ, const at::Tensor& scale,
                            const c10::optional<at::Tensor>& bias, int64_t mode) {
  if (mode != kDequantized) return fp8Forward(x, weightQ, scale, bias);
  const auto dtype = x.scalar_type();
  at::Tensor y;  // [..., out]
  if (dtype == at::kHalf) {
    // fp16 tops out at 65504: a sum over raw values (to 127 int8, 448 fp8) scaled after
    // would overflow for outputs past ~516 (int8) or ~146 (fp8) times the row's max. The
    // weight dequantized with its scale instead: the same transient [out, in] copy.
    auto shape = x.sizes().vec();
    shape.back() = weightQ.size(0);
    y = at::_unsafe_view(at::mm(x.reshape({-1, x.size(-1)}), dequantizeRows(weightQ, scale, dtype).t()), shape);
  } else {
    y = at::linear(x, weightQ.to(dtype)) * scale.to(dtype);
  }
  return bias ? y + *bias : y;
}

// Per-row (or per-tensor) scales commute with the matmul: the output is scaled, not
// a dequantized copy of W; int8 and fp8 e4m3 are exact in bf16 (fp16 multiplies the
// dequantized W, quantizedForward says why). The backward's W has its scale folded in
// for every dtype, so its products stay in range in fp16 too. Plain autograd would
// keep the converted copy of W for the input gradient until the backward (0.7 GB per
// FLUX.1-dev double block); this keeps only the quantized weight and the scale, which
// live anyway, and dequantizes W again in the backward, its scale folded in (one
// kernel on CUDA: nn/QuantKernels.h), or multiplies in fp8. The base
// is frozen: no gradient for W, its scale or the bias (passed only when frozen).
// keptT: the Linear's kept transposed weight [in, out] for the fp8 backward, if any.
struct QuantizedMatmul : torch::autograd::Function<QuantizedMatmul> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weightQ,
                            const at::Tensor& scale, c10::optional<at::Tensor> bias, int64_t mode,
                            c10::optional<at::Tensor> keptT) {
    if (keptT)
      ctx->save_for_backward({weightQ, scale, *keptT});
    else
      ctx->save_for_backward({weightQ, scale});
    ctx->saved_data["mode"] = mode;
    return quantizedForward(x, weightQ, scale, bias, mode);  // [..., out]
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradOut) {
    const auto saved = ctx->get_saved_variables();
    const auto& g = gradOut[0];  // [..., out]
    at::Tensor gx;
    if (ctx->saved_data["mode"].toInt() == kFp8ForwardAndBackward)
      gx = fp8InputGrad(g, saved[0], saved[1], saved.size() > 2 ? saved[2] : at::Tensor());
    else
      gx = at::matmul(g, dequantizeRows(saved[0], saved[1], g.scalar_type()));  // [..., in]
    return {gx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// sum_i parts_i W_q[:, cols_i]^T, times the scale (+ bias), without autograd: the weight
// converted once, one matmul per column block of it, accumulated into one output. The
// same arithmetic as quantizedForward over cat(parts) up to the order of the sums.
at::Tensor quantizedPartsForward(at::TensorList parts, const at::Tensor& weightQ, const at::Tensor& scale,
                                 const c10::optional<at::Tensor>& bias) {
  const auto dtype = parts[0].scalar_type();
  // fp16: the scale folded into the weight, as in quantizedForward (overflow).
  const bool half = dtype == at::kHalf;
  const auto w = half ? dequantizeRows(weightQ, scale, dtype) : weightQ.to(dtype);  // [out, in]
  at::Tensor y;                                                                     // [M, out]
  int64_t offset = 0;
  for (const auto& p : parts) {
    const int64_t n = p.size(1);
    const auto wi = w.narrow(1, offset, n);  // [out, n], rows of stride in: no copy
    y = y.defined() ? at::addmm(y, p, wi.t()) : at::mm(p, wi.t());
    offset += n;
  }
  if (!half) y = y * scale.to(dtype);
  return bias ? y + *bias : y;
}

// QuantizedMatmul over column parts [M, n_i] of the input: the concatenated input is
// neither made nor kept (FLUX's single blocks: [4608, 15360] per block at 1024 px), and
// each part's gradient is its own contiguous [M, n_i] instead of a strided narrow of
// one [M, in] gradient. Keeps the quantized weight and the scale, as QuantizedMatmul.
struct QuantizedPartsMatmul : torch::autograd::Function<QuantizedPartsMatmul> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList parts, const at::Tensor& weightQ,
                            const at::Tensor& scale, c10::optional<at::Tensor> bias) {
    ctx->save_for_backward({weightQ, scale});
    std::vector<int64_t> widths;
    for (const auto& p : parts) widths.push_back(p.size(1));
    ctx->saved_data["widths"] = widths;
    return quantizedPartsForward(parts, weightQ, scale, bias);  // [M, out]
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list gradOut) {
    const auto saved = ctx->get_saved_variables();
    const auto widths = ctx->saved_data["widths"].toIntVector();
    const auto& g = gradOut[0];                                          // [M, out]
    const auto w = dequantizeRows(saved[0], saved[1], g.scalar_type());  // [out, in]
    torch::autograd::variable_list grads(widths.size() + 3);             // parts, weight, scale, bias
    int64_t offset = 0;
    for (size_t i = 0; i < widths.size(); ++i) {
      if (ctx->needs_input_grad(i)) grads[i] = at::mm(g, w.narrow(1, offset, widths[i]));  // [M, n_i]
      offset += widths[i];
    }
    return grads;
  }
};

// Whether a quantized Linear multiplies x on the fp8 tensor cores (nn/Quantize.h).
bool fp8Applies(bool fp8Matmul, const at::Tensor& x) {
  return fp8Matmul && x.is_cuda() && x.scalar_type() == at::kBFloat16;
}

}  // namespace

at::Tensor LinearImpl::fusableBaseWeight() const {
  const auto t = weight.scalar_type();
  if (!fusedPaths() || quantType_ != QuantType::None || (t != at::kBFloat16 && t != at::kHalf) ||
      weight.requires_grad() || (bias.defined() && bias.requires_grad()) || adapters_.size() != 1)
    return at::Tensor();
  return weight;
}

at::Tensor LinearImpl::forwardBase(const at::Tensor& x) const {
  if (quantType_ == QuantType::None) {
    const auto b = bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt;
    if (x.dim() <= 2) return at::linear(x, weight, b);
    // at::linear returns a view of its [M, out] result here; the same values as a plain
    // tensor let an adapter add into the output in place (LoraAdapter). addmm keeps its
    // inputs for the backward, not the result.
    auto shape = x.sizes().vec();
    shape.back() = outFeatures_;
    return at::_unsafe_view(at::linear(x.reshape({-1, x.size(-1)}), weight, b), shape);  // [..., out]
  }
  const bool fp8 = fp8Applies(fp8Matmul_, x);
  const int64_t mode = !fp8 ? kDequantized : fp8Backward_ != Fp8Backward::Bf16 ? kFp8ForwardAndBackward : kFp8Forward;
  // A frozen bias goes into the matmul (fused by _scaled_mm); one that trains is added here.
  const bool biasInside = bias.defined() && !bias.requires_grad();
  const c10::optional<at::Tensor> inside =
      biasInside ? c10::optional<at::Tensor>(bias.to(x.scalar_type())) : c10::nullopt;
  const bool backwardFollows = x.requires_grad() && at::GradMode::is_enabled();
  c10::optional<at::Tensor> keptT;
  if (backwardFollows && mode == kFp8ForwardAndBackward && fp8Backward_ == Fp8Backward::Fp8KeptTranspose) {
    // Keyed on the device only: the frozen base's values never change once quantized,
    // but placement may move the weight (the attachment moves the copy along with it).
    if (!weightT_.defined() || weightT_.device() != weight.device()) {
      at::NoGradGuard noGrad;
      weightT_ = transposedCopy(weight);  // [in, out]
    }
    keptT = weightT_;
  }
  at::Tensor y = backwardFollows ? QuantizedMatmul::apply(x, weight, weightScale, inside, mode, keptT)
                                 : quantizedForward(x, weight, weightScale, inside, mode);  // [..., out]
  if (bias.defined() && !biasInside) y = y + bias.to(x.scalar_type());
  return y;
}

bool LinearImpl::useFp8Matmul(Fp8Backward backward) {
  if (!fp8MatmulQualifies(inFeatures_, outFeatures_, quantType_)) return false;
  fp8Matmul_ = true;
  fp8Backward_ = backward;
  if (backward != Fp8Backward::Fp8KeptTranspose) weightT_ = at::Tensor();
  return true;
}

void LinearImpl::moveKeptWeightTranspose(const c10::Device& device) {
  if (weightT_.defined() && weightT_.device() != device) weightT_ = weightT_.to(device);
}

void LinearImpl::quantize(QuantType t) {
  if (quantType_ != QuantType::None) throw ConfigError("nn::Linear: already quantized");
  if (t == QuantType::None) return;
  at::NoGradGuard noGrad;
  auto q = quantizeWeight(weight, t);
  // Same tensor object, so the module's "weight" entry follows; set_data changes the dtype.
  weight.requires_grad_(false);
  weight.set_data(q.data);
  weightScale = q.scale;
  quantType_ = t;
}

at::Tensor LinearImpl::denseWeight(at::ScalarType dtype) const {
  if (quantType_ == QuantType::None) return weight.to(dtype);
  return dequantizeWeight(weight, weightScale, dtype);
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  if (const auto w = fusableBaseWeight(); w.defined() && adapters_[0]->takesBaseGradient({x}, w)) {
    at::Tensor y;
    {
      at::NoGradGuard baseGradientInTheAdapter;
      y = forwardBase(x);
    }
    return adapters_[0]->addWithBase({x}, -1, at::Tensor(), w, y);
  }
  at::Tensor y = forwardBase(x);
  for (const auto& adapter : adapters_) y = adapter->addTo(x, y);
  return y;
}

at::Tensor LinearImpl::forwardParts(const std::vector<at::Tensor>& partsIn, int64_t geluPart) {
  int64_t width = 0;
  for (const auto& p : partsIn) width += p.size(-1);
  if (partsIn.empty() || width != inFeatures_)
    throw Error("nn::Linear: parts of total width " + std::to_string(width) + " for a Linear of " +
                std::to_string(inFeatures_) + " inputs");
  if (geluPart >= static_cast<int64_t>(partsIn.size()))
    throw Error("nn::Linear: GELU part " + std::to_string(geluPart) + " of " + std::to_string(partsIn.size()) +
                " parts");
  const bool fused = fusedPaths();
  std::vector<at::Tensor> parts = partsIn;
  at::Tensor pre;  // the GELU part before the GELU, or undefined
  if (geluPart >= 0) {
    pre = parts[geluPart];
    parts[geluPart] = at::gelu(pre, "tanh");
  }
  // The dense base's input gradient given by the adapter's backward (takesBaseGradient):
  // the base then runs without autograd.
  const at::Tensor fusedBase = [&] {
    const auto w = fusableBaseWeight();
    return w.defined() && adapters_[0]->takesBaseGradient(parts, w) ? w : at::Tensor();
  }();
  std::optional<at::NoGradGuard> baseWithoutAutograd;
  if (fusedBase.defined()) baseWithoutAutograd.emplace();
  auto withAdapters = [&](at::Tensor y) {
    if (fusedBase.defined()) {
      baseWithoutAutograd.reset();
      return adapters_[0]->addWithBase(parts, pre.defined() ? geluPart : -1, pre, fusedBase, y);
    }
    for (const auto& adapter : adapters_) {
      if (pre.defined() && fused)
        y = adapter->addToGeluParts(parts, geluPart, pre, y);
      else
        y = parts.size() == 1 ? adapter->addTo(parts[0], y) : adapter->addToParts(parts, y);
    }
    return y;
  };
  if (parts.size() == 1) return withAdapters(forwardBase(parts[0]));

  auto outSizes = parts[0].sizes().vec();
  outSizes.back() = outFeatures_;
  std::vector<at::Tensor> flat;  // [M, n_i]
  for (const auto& p : parts) flat.push_back(p.reshape({-1, p.size(-1)}));
  at::Tensor y;  // [M, out]
  if (quantType_ != QuantType::None) {
    // _scaled_mm has no accumulating form (each column block would round to bf16 and
    // need one more pass over [M, out]) and the per-token input scale spans the whole
    // row: the fp8 path takes the concatenated input.
    if (!fused || fp8Applies(fp8Matmul_, parts[0])) return withAdapters(forwardBase(at::cat(parts, -1)));
    const bool biasInside = bias.defined() && !bias.requires_grad();
    const c10::optional<at::Tensor> inside =
        biasInside ? c10::optional<at::Tensor>(bias.to(parts[0].scalar_type())) : c10::nullopt;
    bool needGrad = false;
    for (const auto& p : flat) needGrad = needGrad || p.requires_grad();
    y = needGrad && at::GradMode::is_enabled()
            ? QuantizedPartsMatmul::apply(at::TensorList(flat), weight, weightScale, inside)
            : quantizedPartsForward(flat, weight, weightScale, inside);  // [M, out]
    if (bias.defined() && !biasInside) y = y + bias.to(y.scalar_type());
  } else {
    int64_t offset = 0;
    for (const auto& p2 : flat) {
      const int64_t n = p2.size(1);
      const auto w = weight.narrow(1, offset, n);  // [out, n], rows of stride in: no copy
      if (!y.defined())
        y = bias.defined() ? at::addmm(bias, p2, w.t()) : at::mm(p2, w.t());
      else
        y = at::addmm(y, p2, w.t());  // accumulated where the output is
      offset += n;
    }
  }
  return withAdapters(y.view(outSizes));  // [..., out]
}

void LinearImpl::addAdapter(std::shared_ptr<LinearAdapter> adapter) { adapters_.push_back(std::move(adapter)); }

void LinearImpl::removeAdapter(const LinearAdapter* adapter) {
  adapters_.erase(std::remove_if(adapters_.begin(), adapters_.end(), [&](const auto& a) { return a.get() == adapter; }),
                  adapters_.end());
}

std::vector<at::Tensor> forwardSiblings(const std::vector<LinearImpl*>& linears, const at::Tensor& x) {
  // The fp8 bases quantize x once between them (fp8Forward); restored on return or throw.
  struct ShareInput {
    SharedInputQuantization entry;
    SharedInputQuantization* previous = sharedInput;
    ShareInput() { sharedInput = fusedPaths() ? &entry : nullptr; }
    ~ShareInput() { sharedInput = previous; }
  } share;
  for (size_t i = 0; i < linears.size(); ++i) {
    if (!linears[i]) throw Error("nn::forwardSiblings: Linear " + std::to_string(i) + " is null");
    if (x.dim() < 1 || x.size(-1) != linears[i]->inFeatures())
      throw Error("nn::forwardSiblings: an input of width " + std::to_string(x.dim() < 1 ? 0 : x.size(-1)) +
                  " for Linear " + std::to_string(i) + " of " + std::to_string(linears[i]->inFeatures()) + " inputs");
  }
  // The Linears with exactly one adapter that fuses, of the first such adapter's kind.
  std::vector<size_t> group;
  SiblingAdd add = nullptr;
  if (fusedPaths()) {
    for (size_t i = 0; i < linears.size(); ++i) {
      const auto& a = linears[i]->adapters();
      if (a.size() != 1 || !a[0]->siblingAdd()) continue;
      if (!add) add = a[0]->siblingAdd();
      if (a[0]->siblingAdd() == add) group.push_back(i);
    }
  }
  if (group.size() < 2) group.clear();
  // Where every Linear of the group hands its dense base's input gradient to its adapter
  // (takesBaseGradient), the group's backward gives x all of it in one chain of
  // accumulating GEMMs, and the bases run without autograd.
  std::vector<at::Tensor> baseWeights;
  for (size_t i : group) {
    const auto w = linears[i]->fusableBaseWeight();
    if (!w.defined() || !linears[i]->adapters()[0]->takesBaseGradient({x}, w)) {
      baseWeights.clear();
      break;
    }
    baseWeights.push_back(w);
  }
  std::vector<bool> inGroup(linears.size(), false);
  for (size_t i : group) inGroup[i] = true;
  std::vector<at::Tensor> out(linears.size());
  for (size_t i = 0; i < linears.size(); ++i) {
    std::optional<at::NoGradGuard> baseGradientInTheAdapters;
    if (inGroup[i] && !baseWeights.empty()) baseGradientInTheAdapters.emplace();
    out[i] = linears[i]->forwardBase(x);  // [..., out_i]
  }
  std::vector<bool> done(linears.size(), false);
  if (!group.empty()) {
    std::vector<LinearAdapter*> adapters;
    std::vector<at::Tensor> outputs;
    for (size_t i : group) {
      adapters.push_back(linears[i]->adapters()[0].get());
      outputs.push_back(out[i]);
    }
    if (add(adapters, x, outputs, baseWeights)) {
      for (size_t k = 0; k < group.size(); ++k) {
        out[group[k]] = outputs[k];
        done[group[k]] = true;
      }
    } else if (!baseWeights.empty()) {
      throw Error("nn::forwardSiblings: the adapters took the bases' gradient and then refused the group");
    }
  }
  for (size_t i = 0; i < linears.size(); ++i)
    if (!done[i])
      for (const auto& adapter : linears[i]->adapters()) out[i] = adapter->addTo(x, out[i]);
  return out;
}

}  // namespace strata::nn
