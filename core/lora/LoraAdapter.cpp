#include "lora/LoraAdapter.h"

#include <torch/autograd.h>
#include <torch/nn/init.h>

#include <cmath>
#include <sstream>

#include "common/Error.h"
#include "common/TorchCompat.h"

namespace strata::lora {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Whether an adapter may add its delta into the host's output itself (the caller hands the
// output over: nn::LinearAdapter): a plain contiguous result, no view (autograd forbids
// in-place on some and would re-route gradients through others) and no leaf that trains.
// It saves the copy an out-of-place addmm makes of the [M, out] output (28 MB per
// projection at 1024 px). The bases return plain tensors (nn::LinearImpl: an _unsafe_view
// of their [M, out] result, which has its own version counter), so no check would catch a
// node that kept that result: none does (addmm, mm, the quantized matmuls and the bias
// add keep inputs and weights only), and a new base must not either.
// Off with the fused paths (nn::setFusedPaths), for debugging.
bool addsInPlace(const at::Tensor& output) {
  return nn::fusedPaths() && output.defined() && output.dim() >= 1 && output.is_contiguous() && !output.is_view() &&
         !(output.is_leaf() && output.requires_grad());
}

// A float32 trained tensor's gradient a @ b from activation-dtype a and b: written in
// float32 by the GEMM where LibTorch can (compat::mmToFloat), else cast to `type`.
at::Tensor gradientProduct(const at::Tensor& a, const at::Tensor& b, at::ScalarType type) {
  if (type == at::kFloat) return compat::mmToFloat(a, b);
  return at::mm(a, b).to(type);
}

// output + (x down^T)(s up)^T for x given as column parts [M, n_i] (one part: the whole
// input), in the activations' dtype. Autograd through the plain ops would cast down and
// up again in the backward; this casts each once and keeps the casts (down [r, in] and
// s up [out, r] in bf16: 0.12 GiB over FLUX.1-dev's 418 adapters without checkpointing,
// one block's with it) and h [M, r]. Gradients as the plain ops give them, summed in
// float32: up's from h^T g, times s; down's from gh^T x; the parts' from gh down.
struct LoraAdd : torch::autograd::Function<LoraAdd> {
  // With geluPart >= 0 the part at that index is gelu_tanh(*pre) ([M, n] like it): pre is
  // kept instead of it and the GELU recomputed in the backward (the GELU keeps pre anyway).
  // inPlace (addsInPlace(output)): output [..., out] gets the delta added where it is and is
  // returned; otherwise output is [M, out] and a new tensor is returned. With base (the
  // host's frozen dense weight [out, in]) output was computed without autograd and each
  // part's gradient is the base's and the adapter's, summed by the second GEMM.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& output, const at::Tensor& down,
                            const at::Tensor& up, double s, at::TensorList parts, int64_t geluPart,
                            c10::optional<at::Tensor> pre, bool inPlace, c10::optional<at::Tensor> base) {
    const auto dtype = output.scalar_type();
    const auto downCast = down.to(dtype);  // [r, in]
    at::Tensor h;                          // [M, r]
    int64_t offset = 0;
    for (const auto& x : parts) {
      const int64_t n = x.size(1);
      const auto d = downCast.narrow(1, offset, n);  // [r, n]
      h = h.defined() ? at::addmm(h, x, d.t()) : at::mm(x, d.t());
      offset += n;
    }
    const auto upScaled = s == 1.0 ? up.to(dtype) : (up * s).to(dtype);  // [out, r]
    std::vector<at::Tensor> saved{downCast, upScaled, h};
    saved.insert(saved.end(), parts.begin(), parts.end());
    if (geluPart >= 0) saved[3 + geluPart] = *pre;
    if (base) saved.push_back(*base);
    ctx->save_for_backward(saved);
    ctx->saved_data["parts"] = static_cast<int64_t>(parts.size());
    ctx->saved_data["s"] = s;
    ctx->saved_data["geluPart"] = geluPart;
    ctx->saved_data["downType"] = static_cast<int64_t>(down.scalar_type());
    ctx->saved_data["upType"] = static_cast<int64_t>(up.scalar_type());
    if (inPlace) {
      output.view({-1, output.size(-1)}).addmm_(h, upScaled.t());  // [M, out]
      ctx->mark_dirty({output});
      return output;
    }
    return at::addmm(output, h, upScaled.t());  // [M, out]
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradOut) {
    const auto saved = ctx->get_saved_variables();
    const auto& downCast = saved[0];
    const auto& upScaled = saved[1];
    const auto& h = saved[2];
    const double s = ctx->saved_data["s"].toDouble();
    const auto downType = static_cast<at::ScalarType>(ctx->saved_data["downType"].toInt());
    const auto upType = static_cast<at::ScalarType>(ctx->saved_data["upType"].toInt());
    const auto dtype = h.scalar_type();
    const auto g = gradOut[0].reshape({-1, gradOut[0].size(-1)}).to(dtype);  // [M, out]
    const auto gh = at::mm(g, upScaled);                                     // [M, r]
    const int64_t geluPart = ctx->saved_data["geluPart"].toInt();
    const auto nParts = static_cast<size_t>(ctx->saved_data["parts"].toInt());
    const at::Tensor base = saved.size() > 3 + nParts ? saved[3 + nParts] : at::Tensor();  // [out, in]
    // output, down, up, s (no tensor), parts, geluPart, pre, inPlace, base
    variable_list grads(4 + nParts + 4);
    grads[0] = ctx->needs_input_grad(0) ? gradOut[0] : at::Tensor();
    if (ctx->needs_input_grad(2)) {
      auto gu = gradientProduct(g.t(), h, upType);  // [out, r]
      grads[2] = s == 1.0 ? gu : gu * s;
    }
    std::vector<at::Tensor> gDown;
    int64_t offset = 0;
    for (size_t i = 3; i < 3 + nParts; ++i) {
      const bool gelu = static_cast<int64_t>(i) - 3 == geluPart;
      const int64_t n = saved[i].size(1);
      if (ctx->needs_input_grad(1))  // [r, n]
        gDown.push_back(gradientProduct(gh.t(), gelu ? at::gelu(saved[i], "tanh") : saved[i], downType));
      // needs_input_grad counts tensor inputs only (output, down, up, parts...): part i - 3 is edge i
      if (ctx->needs_input_grad(i)) {
        const auto d = downCast.narrow(1, offset, n);  // [r, n]
        if (base.defined()) {
          auto gx = at::mm(g, base.narrow(1, offset, n));  // [M, n]: the base's
          grads[4 + (i - 3)] = gx.addmm_(gh, d);           // and the adapter's, summed by the GEMM
        } else {
          grads[4 + (i - 3)] = at::mm(gh, d);
        }
      }
      offset += n;
    }
    if (ctx->needs_input_grad(1)) grads[1] = gDown.size() == 1 ? gDown[0] : at::cat(gDown, 1);  // [r, in]
    return grads;
  }
};

// outputs_i + (x down_i^T)(s_i up_i)^T for adapters that read the same x [M, in]: one
// matmul x cat(down_i)^T -> h [M, sum r_i] in the forward and one gh cat(down_i) for
// x's gradient (instead of one per adapter and the sum of their [M, in] results).
// Keeps x (kept by each adapter alone too), h and the casts of the concatenated downs
// and of each s_i up_i, as LoraAdd; the other gradients are LoraAdd's, per adapter.
struct LoraSiblingsAdd : torch::autograd::Function<LoraSiblingsAdd> {
  // inPlace: every output [..., out_i] passes addsInPlace and gets its delta added where it
  // is; otherwise the outputs are [M, out_i] and new tensors are returned.
  // With bases (the hosts' frozen dense weights [out_i, in]) the outputs were computed from
  // x without autograd, and x's gradient is the bases' and the adapters' in one chain of
  // accumulating GEMMs.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList outputs, at::TensorList downs,
                               at::TensorList ups, std::vector<double> scales, bool inPlace, at::TensorList bases) {
    const auto dtype = x.scalar_type();
    const auto downAll = at::cat(downs, 0).to(dtype);  // [R, in]
    const auto h = at::mm(x, downAll.t());             // [M, R]
    variable_list out;
    std::vector<at::Tensor> upsScaled;  // [out_i, r_i]
    std::vector<int64_t> types;         // the trained tensors' dtypes: downs', then ups'
    int64_t offset = 0;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const int64_t r = downs[i].size(0);
      const auto& up = ups[i];
      upsScaled.push_back(scales[i] == 1.0 ? up.to(dtype) : (up * scales[i]).to(dtype));
      if (inPlace) {
        outputs[i].view({-1, outputs[i].size(-1)}).addmm_(h.narrow(1, offset, r), upsScaled.back().t());  // [M, out_i]
        out.push_back(outputs[i]);
      } else {
        out.push_back(at::addmm(outputs[i], h.narrow(1, offset, r), upsScaled.back().t()));  // [M, out_i]
      }
      offset += r;
    }
    if (inPlace) ctx->mark_dirty(variable_list(outputs.begin(), outputs.end()));
    std::vector<int64_t> ranks;
    for (const auto& d : downs) {
      ranks.push_back(d.size(0));
      types.push_back(static_cast<int64_t>(d.scalar_type()));
    }
    for (const auto& u : ups) types.push_back(static_cast<int64_t>(u.scalar_type()));
    std::vector<at::Tensor> saved{x, h, downAll};
    saved.insert(saved.end(), upsScaled.begin(), upsScaled.end());
    saved.insert(saved.end(), bases.begin(), bases.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["scales"] = scales;
    ctx->saved_data["ranks"] = ranks;
    ctx->saved_data["types"] = types;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradOut) {
    const auto saved = ctx->get_saved_variables();
    const auto scales = ctx->saved_data["scales"].toDoubleVector();
    const auto ranks = ctx->saved_data["ranks"].toIntVector();
    const auto types = ctx->saved_data["types"].toIntVector();
    const size_t n = scales.size();
    const auto& x = saved[0];
    const auto& h = saved[1];
    const auto& downAll = saved[2];
    const auto dtype = h.scalar_type();
    const bool withBases = saved.size() == 3 + 2 * n;  // bases follow the ups
    // Edges: x, outputs (n), downs (n), ups (n), bases; returned: those, scales and inPlace.
    variable_list grads(1 + 3 * n + 2 + (withBases ? n : 0));
    std::vector<at::Tensor> ghs;  // [M, r_i]
    std::vector<at::Tensor> gs;   // [M, out_i]
    bool anyDown = false;
    int64_t offset = 0;
    for (size_t i = 0; i < n; ++i) {
      const auto& upScaled = saved[3 + i];  // [out_i, r]
      const int64_t r = ranks[i];
      const auto g = gradOut[i].reshape({-1, gradOut[i].size(-1)}).to(dtype);  // [M, out_i]
      if (ctx->needs_input_grad(1 + i)) grads[1 + i] = gradOut[i];
      ghs.push_back(at::mm(g, upScaled));
      gs.push_back(g);
      if (ctx->needs_input_grad(1 + 2 * n + i)) {
        auto gu = gradientProduct(g.t(), h.narrow(1, offset, r), static_cast<at::ScalarType>(types[n + i]));
        grads[1 + 2 * n + i] = scales[i] == 1.0 ? gu : gu * scales[i];  // [out_i, r]
      }
      anyDown = anyDown || ctx->needs_input_grad(1 + n + i);
      offset += r;
    }
    const auto gh = at::cat(ghs, 1);  // [M, R]
    if (ctx->needs_input_grad(0)) {
      if (withBases) {
        auto gx = at::mm(gs[0], saved[3 + n]);  // [M, in]
        for (size_t i = 1; i < n; ++i) gx.addmm_(gs[i], saved[3 + n + i]);
        grads[0] = gx.addmm_(gh, downAll);
      } else {
        grads[0] = at::mm(gh, downAll);  // [M, in]
      }
    }
    if (anyDown) {
      // One product for all downs, in the first one's dtype (LoraNetwork trains them all in one).
      const auto gDown = gradientProduct(gh.t(), x, static_cast<at::ScalarType>(types[0]));  // [R, in]
      offset = 0;
      for (size_t i = 0; i < n; ++i) {
        const int64_t r = ranks[i];
        if (ctx->needs_input_grad(1 + n + i))
          grads[1 + n + i] = gDown.narrow(0, offset, r).to(static_cast<at::ScalarType>(types[i]));
        offset += r;
      }
    }
    return grads;
  }
};

// LoraAdd into output [..., out]: in place where addsInPlace allows it, else on its
// [M, out] view with a new [..., out] result.
at::Tensor addUp(const at::Tensor& output, const at::Tensor& down, const at::Tensor& up, double s,
                 const std::vector<at::Tensor>& parts, int64_t geluPart, const c10::optional<at::Tensor>& pre,
                 const c10::optional<at::Tensor>& base = c10::nullopt) {
  if (addsInPlace(output)) return LoraAdd::apply(output, down, up, s, at::TensorList(parts), geluPart, pre, true, base);
  return LoraAdd::apply(output.reshape({-1, output.size(-1)}), down, up, s, at::TensorList(parts), geluPart, pre, false,
                        base)
      .view(output.sizes());
}

// nn::SiblingAdd for LoRA adapters (LoraAdapter::siblingAdd).
bool loraSiblingAdd(const std::vector<nn::LinearAdapter*>& adapters, const at::Tensor& x,
                    std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& baseWeights) {
  if (adapters.size() != outputs.size() || adapters.size() < 2 || x.dim() < 1) return false;
  std::vector<at::Tensor> downs, ups, flatOut;
  std::vector<double> scales;
  bool inPlace = true;
  for (size_t i = 0; i < adapters.size(); ++i) {
    const auto* a = dynamic_cast<const LoraAdapter*>(adapters[i]);
    if (!a || !a->fusesWithSiblings()) return false;
    const auto& y = outputs[i];
    if (y.scalar_type() != x.scalar_type() || y.dim() != x.dim() || a->down.device() != x.device()) return false;
    downs.push_back(a->down);
    ups.push_back(a->up);
    scales.push_back(a->scale() * a->multiplierScalar());
    inPlace = inPlace && addsInPlace(y);
  }
  for (const auto& y : outputs) flatOut.push_back(inPlace ? y : y.reshape({-1, y.size(-1)}));
  if (!baseWeights.empty() && baseWeights.size() != adapters.size()) return false;
  const auto sums = LoraSiblingsAdd::apply(x.reshape({-1, x.size(-1)}), at::TensorList(flatOut), at::TensorList(downs),
                                           at::TensorList(ups), scales, inPlace, at::TensorList(baseWeights));
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i] = inPlace ? sums[i] : sums[i].view(outputs[i].sizes());
  return true;
}

}  // namespace

void LoraMultiplier::set(double value) {
  scalar_ = value;
  perSample_ = at::Tensor();
  copies_.clear();
}

void LoraMultiplier::set(const at::Tensor& perSample) {
  if (!perSample.defined() || perSample.dim() != 1)
    throw Error("LoRA multiplier: a per-sample multiplier must be a 1-d tensor [B]");
  scalar_ = 1.0;
  perSample_ = perSample.detach();
  copies_.clear();
}

at::Tensor LoraMultiplier::apply(const at::Tensor& delta) const {
  at::Tensor out = scalar_ == 1.0 ? delta : delta * scalar_;
  if (!perSample_.defined()) return out;
  if (delta.dim() < 1 || perSample_.size(0) != delta.size(0)) {
    std::ostringstream os;
    os << "LoRA multiplier: per-sample multiplier of shape " << perSample_.sizes()
       << " does not match the batch of an adapter output of shape " << delta.sizes();
    throw Error(os.str());
  }
  // Moved here, at the point of use, to the output's device (seed bug 3).
  at::Tensor m;
  for (const auto& c : copies_)
    if (c.device() == delta.device() && c.scalar_type() == delta.scalar_type()) m = c;
  if (!m.defined()) {
    m = perSample_.to(delta.device(), delta.scalar_type());
    copies_.push_back(m);
  }
  std::vector<int64_t> shape(static_cast<size_t>(delta.dim()), 1);
  shape[0] = delta.size(0);
  return out * m.reshape(shape);  // [B, 1, ...]
}

LoraAdapter::LoraAdapter(std::string hostPath, std::shared_ptr<nn::LinearImpl> host, int64_t rank, double alpha,
                         double dropout, std::shared_ptr<const LoraMultiplier> multiplier, at::ScalarType dtype)
    : hostPath_(std::move(hostPath)),
      host_(std::move(host)),
      rank_(rank),
      alpha_(alpha),
      dropout_(dropout),
      multiplier_(std::move(multiplier)) {
  if (!host_) throw Error("LoRA adapter for '" + hostPath_ + "': no host Linear");
  if (rank_ <= 0) throw Error("LoRA adapter for '" + hostPath_ + "': rank must be positive");
  if (!multiplier_) multiplier_ = std::make_shared<LoraMultiplier>();
  // Drawn by the CPU generator, so the same seed gives the same adapters however
  // the model is placed; then put on the host's device, never on a default one (seed bug 1).
  at::Tensor downInit = at::empty({rank_, host_->inFeatures()}, at::kFloat);
  {
    torch::NoGradGuard noGrad;
    torch::nn::init::kaiming_uniform_(downInit, std::sqrt(5.0));
  }
  const auto device = host_->weight.device();
  down = register_parameter("lora_A", downInit.to(device, dtype));
  up = register_parameter("lora_B", at::zeros({host_->outFeatures(), rank_}, at::TensorOptions(dtype).device(device)));
}

at::Tensor LoraAdapter::delta(const at::Tensor& input, const at::Tensor& /*baseOutput*/) {
  const at::Tensor x = (dropout_ > 0.0 && is_training()) ? at::dropout(input, dropout_, true) : input;
  // The weights (float32 masters, or bfloat16) computed in the activation dtype; alpha/r scales the
  // small up weight [out, r] rather than the [..., out] output.
  const auto dtype = input.scalar_type();
  const at::Tensor h = at::linear(x, down.to(dtype));                                            // [..., r]
  const at::Tensor y = at::linear(h, scale() == 1.0 ? up.to(dtype) : (up * scale()).to(dtype));  // [..., out]
  return multiplier_->apply(y);
}

at::Tensor LoraAdapter::addTo(const at::Tensor& input, const at::Tensor& output) {
  if (multiplier_->isPerSample() || input.dim() < 1 || output.scalar_type() != input.scalar_type() ||
      output.dim() != input.dim())
    return output + delta(input, output);
  return addToParts({input}, output);
}

at::Tensor LoraAdapter::addToParts(const std::vector<at::Tensor>& parts, const at::Tensor& output) {
  if (parts.empty() || multiplier_->isPerSample() || output.dim() != parts[0].dim())
    return nn::LinearAdapter::addToParts(parts, output);
  for (const auto& p : parts)
    if (p.scalar_type() != output.scalar_type() || p.dim() != output.dim())
      return nn::LinearAdapter::addToParts(parts, output);
  const bool drop = dropout_ > 0.0 && is_training();
  std::vector<at::Tensor> flat;  // [M, n_i]
  for (const auto& part : parts)
    // Dropout is elementwise: per part it is the dropout of the concatenation.
    flat.push_back((drop ? at::dropout(part, dropout_, true) : part).reshape({-1, part.size(-1)}));
  const double s = scale() * multiplier_->scalar();
  // One GEMM for the up projection: output + h (s up)^T, accumulated into the output.
  return addUp(output, down, up, s, flat, -1, c10::nullopt);
}

at::Tensor LoraAdapter::addToGeluParts(const std::vector<at::Tensor>& parts, int64_t geluPart, const at::Tensor& pre,
                                       const at::Tensor& output) {
  const bool plain = parts.empty() || multiplier_->isPerSample() || output.dim() != parts[0].dim() ||
                     (dropout_ > 0.0 && is_training()) || geluPart < 0 ||
                     geluPart >= static_cast<int64_t>(parts.size()) || !pre.defined() ||
                     pre.sizes() != parts[geluPart].sizes();
  if (plain) return addToParts(parts, output);
  for (const auto& p : parts)
    if (p.scalar_type() != output.scalar_type() || p.dim() != output.dim()) return addToParts(parts, output);
  std::vector<at::Tensor> flat;  // [M, n_i]
  for (const auto& part : parts) flat.push_back(part.reshape({-1, part.size(-1)}));
  const double s = scale() * multiplier_->scalar();
  return addUp(output, down, up, s, flat, geluPart, pre.reshape({-1, pre.size(-1)}));
}

nn::SiblingAdd LoraAdapter::siblingAdd() const { return &loraSiblingAdd; }

bool LoraAdapter::takesBaseGradient(const std::vector<at::Tensor>& parts, const at::Tensor& weight) const {
  if (parts.empty() || !fusesWithSiblings() || !weight.defined() || weight.dim() != 2 ||
      weight.device() != down.device() || parts[0].dim() < 1)
    return false;
  int64_t width = 0;
  for (const auto& p : parts) {
    if (p.scalar_type() != weight.scalar_type() || p.dim() != parts[0].dim() || p.device() != weight.device())
      return false;
    width += p.size(-1);
  }
  return width == weight.size(1) && width == down.size(1);
}

at::Tensor LoraAdapter::addWithBase(const std::vector<at::Tensor>& parts, int64_t geluPart, const at::Tensor& pre,
                                    const at::Tensor& weight, const at::Tensor& output) {
  if (!takesBaseGradient(parts, weight) || output.scalar_type() != weight.scalar_type() ||
      output.dim() != parts[0].dim())
    throw Error("LoRA adapter for '" + hostPath_ + "': asked to take the base's gradient for inputs it cannot");
  std::vector<at::Tensor> flat;  // [M, n_i]
  for (const auto& part : parts) flat.push_back(part.reshape({-1, part.size(-1)}));
  const bool gelu = geluPart >= 0 && geluPart < static_cast<int64_t>(parts.size()) && pre.defined() &&
                    pre.sizes() == parts[geluPart].sizes();
  const double s = scale() * multiplier_->scalar();
  return addUp(output, down, up, s, flat, gelu ? geluPart : -1,
               gelu ? c10::optional<at::Tensor>(pre.reshape({-1, pre.size(-1)})) : c10::nullopt, weight);
}

bool LoraAdapter::fusesWithSiblings() const {
  return !multiplier_->isPerSample() && !(dropout_ > 0.0 && is_training());
}

double LoraAdapter::multiplierScalar() const { return multiplier_->scalar(); }

at::Tensor LoraAdapter::deltaWeight() const {
  return at::matmul(up.to(at::kFloat), down.to(at::kFloat)) * scale();  // [out, in]
}

void LoraAdapter::setWeights(const at::Tensor& newDown, const at::Tensor& newUp) {
  if (newDown.sizes() != down.sizes() || newUp.sizes() != up.sizes()) {
    std::ostringstream os;
    os << "LoRA adapter for '" << hostPath_ << "': expected down " << down.sizes() << " and up " << up.sizes()
       << ", got " << newDown.sizes() << " and " << newUp.sizes();
    throw LoadError(os.str());
  }
  torch::NoGradGuard noGrad;
  down.copy_(newDown.to(down.device(), down.scalar_type()));
  up.copy_(newUp.to(up.device(), up.scalar_type()));
}

void LoraAdapter::moveTo(const c10::Device& device) {
  if (down.device() == device && up.device() == device) return;
  // Module::to swaps the data of the registered parameters, so `down`/`up`
  // (the same tensors) and an optimizer holding them see the new device.
  to(device);
  // Module::to leaves gradients behind; a re-placement between backward and step must not.
  for (at::Tensor* p : {&down, &up})
    if (p->grad().defined() && p->grad().device() != device) p->mutable_grad() = p->grad().to(device);
}

const placement::AttachmentKind& loraAdapterKind() {
  static const placement::AttachmentKind kind = placement::AttachmentKind::registered("lora_adapter");
  return kind;
}

std::vector<std::pair<std::string, at::Tensor>> LoraAttachment::tensors() const {
  return {{"lora_A.weight", adapter_->down}, {"lora_B.weight", adapter_->up}};
}

}  // namespace strata::lora
