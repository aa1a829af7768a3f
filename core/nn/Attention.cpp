#include "nn/Attention.h"

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "common/TorchCompat.h"
#include "nn/GradLayout.h"

#ifdef STRATA_HAS_CUDA
#include <c10/cuda/CUDAGraphsC10Utils.h>
#endif

namespace strata::nn {

namespace {

std::atomic<bool>& autoFlag() {
  static std::atomic<bool> on{false};
  return on;
}

// One decision per shape: the sizes of q, k, v, the dtype and the device.
using ShapeKey = std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>, int, int>;

struct Decisions {
  std::mutex mutex;
  std::map<ShapeKey, bool> cudnnByShape;
  std::vector<AttentionDecision> made;
};

Decisions& decisions() {
  static Decisions d;
  return d;
}

ShapeKey keyOf(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return {q.sizes().vec(), k.sizes().vec(), v.sizes().vec(), static_cast<int>(q.scalar_type()), q.device().index()};
}

std::string shapeText(const at::Tensor& q) {
  // q: [B, H, N, Dh]
  return std::to_string(q.size(2)) + " tokens, " + std::to_string(q.size(1)) + " heads of " +
         std::to_string(q.size(3)) + ", batch " + std::to_string(q.size(0)) + ", " +
         std::string(c10::toString(q.scalar_type())) + ", " + q.device().str();
}

std::string ms(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", v);
  return buf;
}

bool capturing() {
#ifdef STRATA_HAS_CUDA
  return c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
#else
  return false;
#endif
}

// The kernels LibTorch may pick for one call, put back when it ends.
class SdpKernelsFor {
 public:
  explicit SdpKernelsFor(const compat::SdpKernels& only) : saved_(compat::sdpKernels()) { compat::setSdpKernels(only); }
  ~SdpKernelsFor() { compat::setSdpKernels(saved_); }
  SdpKernelsFor(const SdpKernelsFor&) = delete;
  SdpKernelsFor& operator=(const SdpKernelsFor&) = delete;

 private:
  compat::SdpKernels saved_;
};

compat::SdpKernels withCudnn(bool cudnn) {
  compat::SdpKernels k = compat::sdpKernels();
  k.cudnn = cudnn;
  return k;
}

compat::SdpKernels onlyCudnn() { return {true, false, false, false}; }
compat::SdpKernels onlyFlash() { return {false, true, false, false}; }

at::Tensor guardedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return gradInLayoutOf(compat::scaledDotProductAttention(q, k, v));
}

double relativeL2(const at::Tensor& a, const at::Tensor& ref) {
  const double den = ref.to(at::kFloat).norm().item<double>();
  const double num = (a.to(at::kFloat) - ref.to(at::kFloat)).norm().item<double>();
  return den > 0 ? num / den : num;
}

bool allFinite(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts)
    if (!at::isfinite(t).all().item<bool>()) return false;
  return true;
}

// The output-gradient layouts a DiT block hands the attention: O's own ([B, N, H, Dh]
// seen as [B, H, N, Dh]), a narrow of a wider [B, N, H*Dh + extra] (a fused projection's
// concatenation), and [B, H, N, Dh] contiguous.
std::vector<at::Tensor> outputGradients(const at::Tensor& q) {
  const int64_t b = q.size(0), h = q.size(1), n = q.size(2), d = q.size(3);
  const auto opts = q.options().requires_grad(false);
  return {
      at::randn({b, n, h, d}, opts).transpose(1, 2),
      at::randn({b, n, h * d + 4 * d}, opts).narrow(2, 0, h * d).view({b, n, h, d}).transpose(1, 2),
      at::randn({b, h, n, d}, opts),
  };
}

// Forward and backward (once per output-gradient layout) on `kernels`; results in order
// out, then dq, dk, dv for each layout.
std::vector<at::Tensor> runOnce(const compat::SdpKernels& kernels, const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& v, const std::vector<at::Tensor>& grads) {
  const SdpKernelsFor only(kernels);
  const at::AutoGradMode gradOn(true);
  const auto qq = q.detach().requires_grad_(true);
  const auto kk = k.detach().requires_grad_(true);
  const auto vv = v.detach().requires_grad_(true);
  const auto out = guardedAttention(qq, kk, vv);
  std::vector<at::Tensor> results{out.detach()};
  for (size_t i = 0; i < grads.size(); ++i) {
    const bool last = i + 1 == grads.size();
    auto g = torch::autograd::grad({out}, {qq, kk, vv}, {grads[i]}, /*retain_graph=*/!last);
    results.insert(results.end(), g.begin(), g.end());
  }
  return results;
}

AttentionTiming timeKernel(const compat::SdpKernels& kernels, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const std::vector<at::Tensor>& grads,
                           std::vector<at::Tensor>& results) {
  AttentionTiming t;
  try {
    results = runOnce(kernels, q, k, v, grads);  // also builds cuDNN's plans: not timed
    (void)results.front().sum().item<double>();
    std::vector<double> times;
    for (int i = 0; i < 3; ++i) {
      const auto start = std::chrono::steady_clock::now();
      auto again = runOnce(kernels, q, k, v, grads);
      (void)again.back().sum().item<double>();  // waits for the card
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
                      static_cast<double>(grads.size()));
    }
    std::sort(times.begin(), times.end());
    t.ms = times[times.size() / 2];
    t.ran = true;
    t.finite = allFinite(results);
  } catch (const std::exception& e) {
    std::string why = e.what();
    t.why = why.substr(0, why.find('\n'));
    results.clear();
  }
  return t;
}

}  // namespace

void setAttentionAuto(bool on) { autoFlag().store(on); }
bool attentionAuto() { return autoFlag().load(); }

bool preferCudnn(const AttentionTiming& cudnn, const AttentionTiming& flash) {
  if (!cudnn.ran || !cudnn.finite || !(cudnn.relativeL2 <= kAttentionTolerance)) return false;
  if (!flash.ran || !flash.finite) return true;  // flash cannot run here: cuDNN's numbers stand alone
  return cudnn.ms < flash.ms;
}

std::string AttentionDecision::text() const {
  std::string s = "attention at " + shape + ": " + (cudnn ? "cuDNN" : "flash");
  auto timing = [](const char* name, const AttentionTiming& t) {
    if (!t.ran) return std::string(name) + " could not run (" + t.why + ")";
    std::string r = std::string(name) + " " + ms(t.ms);
    if (!t.finite) r += " with non-finite results";
    return r;
  };
  s += " (a forward and backward: " + timing("cuDNN", cudnnTiming) + ", " + timing("flash", flashTiming);
  if (cudnnTiming.ran && cudnnTiming.finite && cudnnTiming.relativeL2 > kAttentionTolerance) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", cudnnTiming.relativeL2);
    s += std::string("; cuDNN's numbers were ") + buf + " from flash's";
  }
  return s + ")";
}

std::vector<AttentionDecision> attentionDecisions(size_t from) {
  auto& d = decisions();
  const std::lock_guard<std::mutex> lock(d.mutex);
  if (from >= d.made.size()) return {};
  return {d.made.begin() + static_cast<std::ptrdiff_t>(from), d.made.end()};
}

AttentionDecision probeAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  AttentionDecision d;
  d.shape = shapeText(q);
  if (!q.is_cuda()) return d;
  const at::NoGradGuard noGrad;  // the inputs below are the probe's own
  // Random inputs of the call's shape and layout (the block's q, k, v are views of
  // [B, N, H, Dh]); values of the call's own would do as well, but these are known finite.
  auto like = [](const at::Tensor& t) { return at::randn_like(t, at::MemoryFormat::Preserve); };
  const auto pq = like(q), pk = like(k), pv = like(v);
  const auto grads = outputGradients(q);
  std::vector<at::Tensor> flashResults, cudnnResults;
  d.flashTiming = timeKernel(onlyFlash(), pq, pk, pv, grads, flashResults);
  d.cudnnTiming = timeKernel(onlyCudnn(), pq, pk, pv, grads, cudnnResults);
  if (d.cudnnTiming.ran && d.flashTiming.ran && cudnnResults.size() == flashResults.size())
    for (size_t i = 0; i < cudnnResults.size(); ++i)
      d.cudnnTiming.relativeL2 = std::max(d.cudnnTiming.relativeL2, relativeL2(cudnnResults[i], flashResults[i]));
  if (!std::isfinite(d.cudnnTiming.relativeL2)) d.cudnnTiming.relativeL2 = INFINITY;
  d.cudnn = preferCudnn(d.cudnnTiming, d.flashTiming);
  return d;
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!q.is_cuda() || !attentionAuto()) return guardedAttention(q, k, v);
  bool cudnn = false;
  {
    auto& d = decisions();
    const auto key = keyOf(q, k, v);
    std::unique_lock<std::mutex> lock(d.mutex);
    const auto it = d.cudnnByShape.find(key);
    if (it != d.cudnnByShape.end()) {
      cudnn = it->second;
    } else if (capturing()) {
      // A shape first seen while a CUDA graph records cannot be timed there: flash
      // (StepGraph records after eager steps, so the step's shapes are decided by then).
      cudnn = false;
    } else {
      lock.unlock();
      AttentionDecision made = probeAttention(q, k, v);
      cudnn = made.cudnn;
      lock.lock();
      // Another thread may have timed the same shape meanwhile: one decision, said once.
      if (d.cudnnByShape.emplace(key, cudnn).second) d.made.push_back(std::move(made));
    }
  }
  const SdpKernelsFor chosen(withCudnn(cudnn));
  return guardedAttention(q, k, v);
}

}  // namespace strata::nn
