#include "train/AdamW8bit.h"

#include <ATen/ATen.h>

#include <cfloat>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "common/Error.h"
#include "common/TorchCompat.h"

namespace strata::train {

namespace {

constexpr int64_t kChunkValues = int64_t(8) << 20;  // ~8M values per chunk: ~0.25 GB of float32 temporaries

// The positive entries, ascending: decade e (values in (10^-(e+1), 10^-e]) gets
// counts[e] geometrically spaced points, densest just below the maximum, where
// most of a block's values are (a few percent of relative error there; the
// sparse lower decades only keep small values from collapsing to zero).
std::vector<double> positiveEntries(const std::vector<int>& counts) {
  std::vector<double> out;
  for (int e = static_cast<int>(counts.size()) - 1; e >= 0; --e)
    for (int i = 0; i < counts[e]; ++i)
      out.push_back(std::pow(10.0, -e - static_cast<double>(counts[e] - 1 - i) / counts[e]));
  return out;
}

std::vector<double> tableValues(bool isSigned) {
  if (!isSigned) {
    // 0 and 255 positives: relative steps 2.4%, 3.7%, 5.9%, 10% in the top four
    // decades (half of that as the error of the nearest entry), ~33% below.
    auto pos = positiveEntries({96, 64, 40, 24, 8, 8, 8, 7});
    std::vector<double> t{0.0};
    t.insert(t.end(), pos.begin(), pos.end());
    return t;
  }
  // 128 positives (steps 4.9%, 7.5%, 12%, 21% in the top four decades, 78% below), the
  // negatives mirroring all but the smallest (127), and zero: 256 entries.
  auto pos = positiveEntries({48, 32, 20, 12, 4, 4, 4, 4});
  std::vector<double> t;
  for (size_t i = pos.size(); i-- > 1;) t.push_back(-pos[i]);
  t.push_back(0.0);
  t.insert(t.end(), pos.begin(), pos.end());
  return t;
}

// The table's midpoints (255): bucketize against them picks the nearest entry.
const at::Tensor& midpoints(bool isSigned, const c10::Device& device) {
  static std::mutex mutex;
  static std::map<std::pair<bool, std::string>, at::Tensor> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& t = cache[{isSigned, device.str()}];
  if (!t.defined()) {
    const auto& table = blockwise8Table(isSigned, device);
    t = (table.narrow(0, 1, table.size(0) - 1) + table.narrow(0, 0, table.size(0) - 1)) * 0.5;
  }
  return t;
}

int64_t zeroCode(bool isSigned) { return isSigned ? 127 : 0; }

struct Hyper {
  double lr, beta1, beta2, eps, weightDecay;
};

struct Entry {
  at::Tensor param;
  AdamW8bitParamState* state;
};

// One AdamW step of `entries` (one device, one step count) on float32 moments
// dequantized from and quantized back to 8 bits.
void stepChunk(const std::vector<Entry>& entries, int64_t step, const Hyper& h) {
  const auto device = entries.front().param.device();
  const auto f32 = at::TensorOptions().device(device).dtype(at::kFloat);
  std::vector<at::Tensor> grads, avgCodes, avgMax, sqCodes, sqMax;
  for (const auto& e : entries) {
    const int64_t n = e.param.numel(), len = blockwise8Length(n);
    auto g = e.param.grad().reshape({-1}).to(at::kFloat);
    grads.push_back(len == n ? g : at::constant_pad_nd(g, {0, len - n}));
    const bool started = e.state->avgCodes.defined();
    const auto u8 = f32.dtype(at::kByte);
    avgCodes.push_back(started ? e.state->avgCodes : at::full({len}, zeroCode(true), u8));
    avgMax.push_back(started ? e.state->avgAbsmax : at::zeros({len / kBlock8}, f32));
    sqCodes.push_back(started ? e.state->sqCodes : at::full({len}, zeroCode(false), u8));
    sqMax.push_back(started ? e.state->sqAbsmax : at::zeros({len / kBlock8}, f32));
  }
  const auto g = at::cat(grads);  // [sum len]
  auto m = dequantizeBlockwise8(at::cat(avgCodes), at::cat(avgMax), true);
  auto v = dequantizeBlockwise8(at::cat(sqCodes), at::cat(sqMax), false);
  m.mul_(h.beta1).add_(g, 1.0 - h.beta1);
  v.mul_(h.beta2).addcmul_(g, g, 1.0 - h.beta2);
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(step));
  // AdamW's arithmetic: p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
  const auto delta = m / v.sqrt().div_(std::sqrt(bc2)).add_(h.eps);
  delta.mul_(-h.lr / bc1);

  std::vector<at::Tensor> params, deltas;
  int64_t offset = 0;
  for (const auto& e : entries) {
    const int64_t n = e.param.numel();
    params.push_back(e.param);
    auto d = delta.narrow(0, offset, n).view(e.param.sizes());
    deltas.push_back(e.param.scalar_type() == at::kFloat ? d : d.to(e.param.scalar_type()));
    offset += blockwise8Length(n);
  }
  if (h.weightDecay != 0.0) at::_foreach_mul_(params, 1.0 - h.lr * h.weightDecay);
  at::_foreach_add_(params, deltas);

  // Each state keeps views of the new buffers (no copies back).
  const auto qm = quantizeBlockwise8(m, true);
  const auto qv = quantizeBlockwise8(v, false);
  offset = 0;
  for (const auto& e : entries) {
    const int64_t len = blockwise8Length(e.param.numel());
    auto& s = *e.state;
    s.avgCodes = qm.codes.narrow(0, offset, len);
    s.avgAbsmax = qm.absmax.narrow(0, offset / kBlock8, len / kBlock8);
    s.sqCodes = qv.codes.narrow(0, offset, len);
    s.sqAbsmax = qv.absmax.narrow(0, offset / kBlock8, len / kBlock8);
    offset += len;
  }
}

}  // namespace

const at::Tensor& blockwise8Table(bool isSigned, const c10::Device& device) {
  static std::mutex mutex;
  static std::map<std::pair<bool, std::string>, at::Tensor> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& t = cache[{isSigned, device.str()}];
  if (!t.defined()) {
    const auto values = tableValues(isSigned);
    t = at::tensor(values, at::TensorOptions().dtype(at::kDouble)).to(at::kFloat).to(device);
  }
  return t;
}

Blockwise8 quantizeBlockwise8(const at::Tensor& x, bool isSigned) {
  if (x.scalar_type() != at::kFloat || x.numel() % kBlock8 != 0)
    throw Error("quantizeBlockwise8: needs float32 values in whole blocks of " + std::to_string(kBlock8) + ", got " +
                std::to_string(x.numel()) + " " + std::string(c10::toString(x.scalar_type())));
  const auto blocks = x.reshape({-1, kBlock8});                             // [blocks, kBlock8]
  const auto absmax = blocks.abs().amax(1, /*keepdim=*/true);               // [blocks, 1]
  const auto normalized = blocks / absmax.clamp_min(FLT_MIN);               // in [-1, 1]
  auto codes = at::bucketize(normalized, midpoints(isSigned, x.device()));  // nearest entry, int64
  if (!isSigned) codes = at::where(normalized > 0, codes.clamp_min(1), codes);
  return {codes.to(at::kByte).reshape({-1}), absmax.reshape({-1})};
}

at::Tensor dequantizeBlockwise8(const at::Tensor& codes, const at::Tensor& absmax, bool isSigned) {
  if (codes.scalar_type() != at::kByte || codes.numel() != absmax.numel() * kBlock8)
    throw Error("dequantizeBlockwise8: " + std::to_string(codes.numel()) + " codes for " +
                std::to_string(absmax.numel()) + " blocks of " + std::to_string(kBlock8));
  const auto& table = blockwise8Table(isSigned, codes.device());
  const auto values = table.index_select(0, codes.reshape({-1}).to(at::kLong)).view({-1, kBlock8});
  return (values * absmax.reshape({-1, 1})).reshape({-1});
}

// ---- state ---------------------------------------------------------------------

namespace {
at::Tensor momentOf(const at::Tensor& codes, const at::Tensor& absmax, bool isSigned, const at::Tensor& param) {
  if (!codes.defined()) return at::zeros(param.sizes(), param.options().dtype(at::kFloat));
  return dequantizeBlockwise8(codes, absmax, isSigned).narrow(0, 0, param.numel()).view(param.sizes());
}

Blockwise8 quantizedMoment(const at::Tensor& values, bool isSigned) {
  const auto flat = values.reshape({-1}).to(at::kFloat);
  const int64_t n = flat.numel(), len = blockwise8Length(n);
  return quantizeBlockwise8(len == n ? flat.contiguous() : at::constant_pad_nd(flat, {0, len - n}), isSigned);
}
}  // namespace

at::Tensor AdamW8bitParamState::expAvg(const at::Tensor& param) const {
  return momentOf(avgCodes, avgAbsmax, true, param);
}

at::Tensor AdamW8bitParamState::expAvgSq(const at::Tensor& param) const {
  return momentOf(sqCodes, sqAbsmax, false, param);
}

void AdamW8bitParamState::setMoments(const at::Tensor& expAvg, const at::Tensor& expAvgSq) {
  auto a = quantizedMoment(expAvg, true);
  auto b = quantizedMoment(expAvgSq, false);
  avgCodes = a.codes;
  avgAbsmax = a.absmax;
  sqCodes = b.codes;
  sqAbsmax = b.absmax;
}

std::vector<std::pair<std::string, at::Tensor>> AdamW8bitParamState::stateTensors() const {
  if (!avgCodes.defined()) return {};
  return {{"exp_avg.blockwise8", avgCodes},
          {"exp_avg.blockwise8_absmax", avgAbsmax},
          {"exp_avg_sq.blockwise8", sqCodes},
          {"exp_avg_sq.blockwise8_absmax", sqAbsmax}};
}

void AdamW8bitParamState::moveStateTo(const c10::Device& device) {
  for (at::Tensor* t : {&avgCodes, &avgAbsmax, &sqCodes, &sqAbsmax})
    if (t->defined() && t->device() != device) *t = t->to(device);
}

// ---- optimizer -----------------------------------------------------------------

AdamW8bit::AdamW8bit(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults)
    : LoraOptimizer(std::move(params), defaults) {
  if (defaults.amsgrad()) throw ConfigError("adamw8bit has no amsgrad variant; use train.optimizer: adamw");
}

AdamW8bitParamState* AdamW8bit::stateOf(const at::Tensor& param) {
  auto it = state_.find(compat::optimizerStateKey(param));
  return it == state_.end() ? nullptr : dynamic_cast<AdamW8bitParamState*>(it->second.get());
}

at::Tensor AdamW8bit::step(LossClosure closure) {
  at::NoGradGuard noGrad;
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad()) throw ConfigError("adamw8bit has no amsgrad variant; use train.optimizer: adamw");
    const Hyper h{o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(), o.weight_decay()};
    // One chunk list per device and step count (a parameter whose gradient was
    // missing in some step has fewer steps), in parameter order.
    std::map<std::tuple<std::string, int64_t>, std::vector<Entry>> buckets;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (p.grad().is_sparse()) throw Error("adamw8bit: sparse gradients are not supported");
      auto& slot = state_[compat::optimizerStateKey(p)];
      if (!slot) slot = std::make_unique<AdamW8bitParamState>();
      auto* s = dynamic_cast<AdamW8bitParamState*>(slot.get());
      if (!s) throw Error("adamw8bit: a parameter holds another optimizer's state");
      s->moveStateTo(p.device());  // placement moves it with the block; this is the belt
      s->step += 1;
      buckets[{p.device().str(), s->step}].push_back({p, s});
    }
    for (auto& [key, entries] : buckets) {
      std::vector<Entry> chunk;
      int64_t values = 0;
      for (const auto& e : entries) {
        chunk.push_back(e);
        values += blockwise8Length(e.param.numel());
        if (values >= kChunkValues) {
          stepChunk(chunk, std::get<1>(key), h);
          chunk.clear();
          values = 0;
        }
      }
      if (!chunk.empty()) stepChunk(chunk, std::get<1>(key), h);
    }
  }
  return loss;
}

}  // namespace strata::train
