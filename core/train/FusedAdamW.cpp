#include "train/FusedAdamW.h"

#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "common/Error.h"
#include "common/TorchCompat.h"

#ifdef STRATA_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#if STRATA_TORCH_AT_LEAST(2, 8)
#include <ATen/core/CachingHostAllocator.h>
#else
#include <ATen/cuda/CachingHostAllocator.h>
#endif
#endif

namespace strata::train {

bool fusedAdamWAvailable(const c10::Device& device) { return compat::kHasFusedAdamW && device.is_cuda(); }

namespace {

// The tensors of one kernel call: same device, same dtype, same step count.
struct Bucket {
  std::vector<at::Tensor> params, grads, avgs, sqs;
  std::vector<torch::optim::AdamWParamState*> states;  // of params, in order
};

using BucketKey = std::tuple<std::string, int, int64_t>;  // device, dtype, step

bool fusableType(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

int64_t tensorBytes(const at::Tensor& t) { return static_cast<int64_t>(t.numel()) * t.element_size(); }

// The entries `idx` of `v`.
std::vector<at::Tensor> pick(const std::vector<at::Tensor>& v, const std::vector<size_t>& idx, size_t begin,
                             size_t end) {
  std::vector<at::Tensor> out;
  out.reserve(end - begin);
  for (size_t k = begin; k < end; ++k) out.push_back(v[idx[k]]);
  return out;
}

// The moments host[idx[begin..end)] as one flat tensor over their shared storage when
// they lie back to back in it (contiguous, one dtype, in this order); else undefined.
at::Tensor flatSpan(const std::vector<at::Tensor>& host, const std::vector<size_t>& idx, size_t begin, size_t end) {
  const at::Tensor& first = host[idx[begin]];
  int64_t numel = 0;
  for (size_t k = begin; k < end; ++k) {
    const at::Tensor& h = host[idx[k]];
    if (!h.is_contiguous() || h.scalar_type() != first.scalar_type() || !h.is_alias_of(first) ||
        h.storage_offset() != first.storage_offset() + numel)
      return {};
    numel += h.numel();
  }
  return at::empty({0}, first.options()).set_(first.storage(), first.storage_offset(), {numel}, {1});
}

// Moves host[idx[begin..end)] into one new flat host buffer (pinned or not) and makes
// each state's moment (exp_avg or exp_avg_sq, by `set`) a view of it, so the chunk
// crosses to the card in one copy each way. Returns the buffer.
template <typename Set>
at::Tensor packFlat(std::vector<at::Tensor>& host, const std::vector<torch::optim::AdamWParamState*>& states,
                    const std::vector<size_t>& idx, size_t begin, size_t end, bool pinned, Set set) {
  const at::Tensor& first = host[idx[begin]];
  int64_t numel = 0;
  for (size_t k = begin; k < end; ++k) numel += host[idx[k]].numel();
  at::Tensor flat = at::empty({numel}, at::TensorOptions().dtype(first.scalar_type()).pinned_memory(pinned));
  int64_t offset = 0;
  for (size_t k = begin; k < end; ++k) {
    at::Tensor& h = host[idx[k]];
    at::Tensor view = flat.narrow(0, offset, h.numel()).view(h.sizes());
    view.copy_(h);
    set(*states[idx[k]], view);
    offset += h.numel();
    h = view;
  }
  return flat;
}

// Hands the pinned blocks LibTorch caches but no tensor uses back to the system: the
// moments a resume pinned one by one, once packed, would otherwise stay held twice.
void releaseCachedPinnedMemory() {
#ifdef STRATA_HAS_CUDA
#if STRATA_TORCH_AT_LEAST(2, 8)
  at::getHostAllocator(at::kCUDA)->empty_cache();
#else
  at::cuda::CachingHostAllocator_emptyCache();
#endif
#endif
}

// Staging offsets on the card: 256-byte aligned, as the allocator's own blocks are.
int64_t alignedBytes(int64_t bytes) { return (bytes + 255) / 256 * 256; }

#ifdef STRATA_HAS_CUDA
// Two staging slots on one card, used in turn by the packed chunks of a step: a chunk's
// moments cross in on the compute stream into one slot and back out on a side stream,
// so one chunk's copy back runs beside the next one's copy in (the link's two ways). A
// slot is filled again only once its copy back is done: the compute stream waits for
// that on the card, not the host.
class StagingSlots {
 public:
  // `slots`: 1 for a single chunk, else 2; allocated when first acquired.
  StagingSlots(const c10::Device& device, int64_t slotBytes, int slots)
      : device_(device), side_(c10::cuda::getStreamFromPool(false, device.index())), bytes_(slotBytes), count_(slots) {}
  StagingSlots(const StagingSlots&) = delete;
  StagingSlots& operator=(const StagingSlots&) = delete;
  // A step that throws half way: the copies back queued so far land before the slots go.
  ~StagingSlots() {
    if (!slots_[0].defined()) return;
    for (auto& e : copiedBack_) try {
        if (e) e->synchronize();
      } catch (...) {  // already unwinding (a CUDA error): the first error is the one reported
      }
  }

  // The next chunk's slot ([slotBytes] bytes), once its last copy back has read it.
  const at::Tensor& acquire() {
    if (!slots_[next_].defined())
      slots_[next_] = at::empty({bytes_}, at::TensorOptions().dtype(at::kByte).device(device_));
    if (copiedBack_[next_]) copiedBack_[next_]->block(c10::cuda::getCurrentCUDAStream(device_.index()));
    return slots_[next_];
  }
  // Queues the acquired slot's (host, staged) copies back once the work queued so far
  // on the compute stream (the update) is done; the next chunk takes the other slot.
  void copyBack(const std::vector<std::pair<at::Tensor, at::Tensor>>& pairs) {
    const c10::cuda::CUDAGuard guard(device_);
    at::cuda::CUDAEvent updated;
    updated.record(c10::cuda::getCurrentCUDAStream(device_.index()));
    updated.block(side_);
    {
      const c10::cuda::CUDAStreamGuard onSide(side_);
      for (const auto& [host, staged] : pairs) host.copy_(staged, /*non_blocking=*/true);
    }
    copiedBack_[next_] = std::make_shared<at::cuda::CUDAEvent>();
    copiedBack_[next_]->record(side_);
    next_ = count_ == 2 ? 1 - next_ : 0;
  }
  // Gives the slots back (the allocator reuses them once the side stream is past its
  // copies) and returns the wait for the last copy back (the side stream runs in order).
  std::function<void()> release() {
    for (auto& s : slots_) {
      if (s.defined()) s.record_stream(side_);
      s = at::Tensor();
    }
    const int lastUsed = count_ == 2 ? 1 - next_ : 0;
    std::shared_ptr<at::cuda::CUDAEvent> last = copiedBack_[lastUsed] ? copiedBack_[lastUsed] : copiedBack_[next_];
    return [last] {
      if (last) last->synchronize();
    };
  }

 private:
  c10::Device device_;
  c10::cuda::CUDAStream side_;
  int64_t bytes_;
  int count_;
  std::array<at::Tensor, 2> slots_;
  std::array<std::shared_ptr<at::cuda::CUDAEvent>, 2> copiedBack_;
  int next_ = 0;
};
#endif

}  // namespace

FusedAdamW::~FusedAdamW() {
  try {
    finishCopiesBack();
  } catch (...) {  // a destructor does not throw; the pinned blocks wait for their copies anyway
  }
}

void FusedAdamW::finishCopiesBack() {
  auto pending = std::move(copiesBackPending_);
  copiesBackPending_.clear();
  for (auto& wait : pending) wait();
}

std::vector<std::pair<size_t, size_t>> stagingChunks(const std::vector<int64_t>& bytes, int64_t limit) {
  if (limit < 1) throw Error("FusedAdamW: staging chunk of " + std::to_string(limit) + " bytes (must be >= 1)");
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0;
  int64_t sum = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i > begin && sum + bytes[i] > limit) {
      out.emplace_back(begin, i);
      begin = i;
      sum = 0;
    }
    sum += bytes[i];
  }
  if (begin < bytes.size()) out.emplace_back(begin, bytes.size());
  return out;
}

void FusedAdamW::setStagingChunkBytes(int64_t bytes) {
  if (bytes < 1) throw Error("FusedAdamW: staging chunk of " + std::to_string(bytes) + " bytes (must be >= 1)");
  stagingChunkBytes_ = bytes;
}

bool FusedAdamW::canSkipOnDevice() const {
  if (!allowFused_) return false;
  for (const auto& group : param_groups_) {
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad()) return false;
    for (const auto& p : group.params())
      if (!fusedAdamWAvailable(p.device()) || !fusableType(p.scalar_type())) return false;
  }
  return true;
}

void FusedAdamW::skipNextStepIfNotFinite(at::Tensor value) {
  if (!canSkipOnDevice()) throw Error("FusedAdamW: a step can be skipped on the device only on the fused path");
  skipIfNotFinite_ = std::move(value);
}

at::Tensor FusedAdamW::step(LossClosure closure) {
  // Taken for this step only, whichever path it takes.
  const at::Tensor skipIf = std::exchange(skipIfNotFinite_, at::Tensor());
  for (const auto& group : param_groups_)
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad()) {
      // AdamW's own step needs the state on the parameter's device.
      if (stateInHostMemory_) throw Error("FusedAdamW: amsgrad cannot keep its state in host memory");
      lastPath_ = "per-tensor";
      return torch::optim::AdamW::step(std::move(closure));
    }
  at::NoGradGuard noGrad;
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable(true);
    loss = closure();
  }
  // What the step refuses, refused before any parameter, moment or step count changes.
  for (const auto& group : param_groups_)
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (p.grad().is_sparse()) throw Error("FusedAdamW: sparse gradients are not supported");
      // The staged copies are contiguous, and the kernels pair elements by index.
      if (stateInHostMemory_ && p.is_cuda() && !p.is_contiguous() && !state_.count(compat::optimizerStateKey(p)))
        throw Error("FusedAdamW: a parameter whose state is in host memory must be contiguous");
    }
  // The host reads (packs) and the card reads (stages) the host moments below: the last
  // step's copies back into them must have landed.
  finishCopiesBack();
  // Should the step throw half way, the slots' copies back queued by then land before
  // the exception leaves step() (the slots of the bucket at hand wait in their destructor).
  struct FinishSlotCopiesOnThrow {
    FusedAdamW& self;
    int unwinding = std::uncaught_exceptions();
    ~FinishSlotCopiesOnThrow() {
      if (std::uncaught_exceptions() == unwinding) return;
      try {
        self.finishCopiesBack();
      } catch (...) {  // already unwinding: the first error is the one reported
      }
    }
  } finishSlotsOnThrow{*this};
  std::string path;
  lastStagedChunks_ = 0;
  bool packedPinnedMoments = false;  // pinned moments replaced by packed ones this step
  // A moment with the parameter's device and dtype, zero; in host memory for a CUDA
  // parameter whose state is kept off the card (pageable here: the staging below
  // packs each chunk's moments into one pinned buffer before anything is copied).
  auto newMoment = [&](const at::Tensor& p) {
    if (stateInHostMemory_ && p.is_cuda()) return at::zeros(p.sizes(), p.options().device(at::kCPU));
    return at::zeros_like(p, at::MemoryFormat::Preserve);
  };
  // Copies back outside the staging slots (moments not packed): per device, the last
  // one is issued blocking once every other copy is queued, so those have landed when
  // step() returns.
  std::map<std::string, std::pair<at::Tensor, at::Tensor>> lastCopyBack;  // device -> (host, staged)
  auto copyBack = [&](const at::Tensor& host, const at::Tensor& staged) {
    auto& last = lastCopyBack[staged.device().str()];
    if (last.first.defined()) last.first.copy_(last.second, /*non_blocking=*/true);
    last = {host, staged};
  };
  // Should the step throw half way, the moments already updated still reach the host,
  // and nothing is in flight into the state when the exception leaves step().
  struct FinishCopiesBack {
    std::map<std::string, std::pair<at::Tensor, at::Tensor>>& pending;
    ~FinishCopiesBack() {
      for (auto& [device, last] : pending) try {
          last.first.copy_(last.second, /*non_blocking=*/false);
        } catch (...) {  // already unwinding: the first error is the one reported
        }
    }
  } finishOnThrow{lastCopyBack};
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const double lr = o.lr(), wd = o.weight_decay(), eps = o.eps();
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    std::map<BucketKey, Bucket> buckets;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto& grad = p.grad();
      auto& slot = state_[compat::optimizerStateKey(p)];
      if (!slot) {
        // As AdamW starts a parameter: step 0, zero moments.
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(0);
        s->exp_avg(newMoment(p));
        s->exp_avg_sq(newMoment(p));
        slot = std::move(s);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      auto& b = buckets[{p.device().str(), static_cast<int>(p.scalar_type()), s.step()}];
      b.params.push_back(p);
      b.grads.push_back(grad);
      b.avgs.push_back(s.exp_avg());
      b.sqs.push_back(s.exp_avg_sq());
      b.states.push_back(&s);
    }
    for (auto& [key, b] : buckets) {
      const int64_t step = std::get<2>(key);
      const auto device = b.params.front().device();
      const auto dtype = b.params.front().scalar_type();
      const bool fused = allowFused_ && fusableType(dtype) && fusedAdamWAvailable(device);
      at::Tensor foundInf;  // 1 where the step is to be skipped (fused path)
      if (fused && skipIf.defined())
        foundInf = at::logical_not(at::isfinite(skipIf)).to(device, at::kFloat, /*non_blocking=*/true);
      // One update over lists of tensors on `device`: the same arithmetic whether the
      // moments are the state itself or staged copies of it.
      auto update = [&](std::vector<at::Tensor> params, std::vector<at::Tensor> grads, std::vector<at::Tensor> avgs,
                        std::vector<at::Tensor> sqs) {
        if (fused) {
          // The kernel reads one float step per tensor; all of this bucket share one.
          const auto stepTensor = at::full({}, static_cast<double>(step), at::TensorOptions(device).dtype(at::kFloat));
          const std::vector<at::Tensor> steps(params.size(), stepTensor);
          compat::fusedAdamW(params, grads, avgs, sqs, steps, lr, beta1, beta2, wd, eps, foundInf);
          path = "fused";
          return;
        }
        // AdamW's own arithmetic, op for op, over the whole list.
        if (wd != 0.0) at::_foreach_mul_(params, 1.0 - lr * wd);
        const double biasCorrection1 = 1.0 - std::pow(beta1, static_cast<double>(step));
        const double biasCorrection2 = 1.0 - std::pow(beta2, static_cast<double>(step));
        at::_foreach_mul_(avgs, beta1);
        at::_foreach_add_(avgs, grads, 1.0 - beta1);
        at::_foreach_mul_(sqs, beta2);
        at::_foreach_addcmul_(sqs, grads, grads, 1.0 - beta2);
        auto denom = at::_foreach_sqrt(sqs);
        at::_foreach_div_(denom, std::sqrt(biasCorrection2));
        at::_foreach_add_(denom, eps);
        at::_foreach_addcdiv_(params, avgs, denom, -lr / biasCorrection1);
        if (path.empty()) path = "foreach";
      };
      // Moments kept on another device than their parameter (pinned host memory) are
      // staged; the rest are updated where they are.
      std::vector<size_t> direct, staged;
      for (size_t i = 0; i < b.params.size(); ++i) {
        const bool away = b.avgs[i].device() != device || b.sqs[i].device() != device;
        (away || stageOnSameDevice_ ? staged : direct).push_back(i);
      }
      if (!direct.empty()) {
        update(pick(b.params, direct, 0, direct.size()), pick(b.grads, direct, 0, direct.size()),
               pick(b.avgs, direct, 0, direct.size()), pick(b.sqs, direct, 0, direct.size()));
      }
      if (staged.empty()) continue;
      std::vector<int64_t> bytes;
      for (size_t i : staged) bytes.push_back(tensorBytes(b.avgs[i]) + tensorBytes(b.sqs[i]));
      const auto chunks = stagingChunks(bytes, stagingChunkBytes_);
#ifdef STRATA_HAS_CUDA
      // A slot holds any chunk's two packed moments.
      std::unique_ptr<StagingSlots> slots;
      if (device.is_cuda()) {
        int64_t slotBytes = 0;
        for (const auto& [begin, end] : chunks) {
          int64_t avgBytes = 0, sqBytes = 0;
          for (size_t k = begin; k < end; ++k) {
            avgBytes += tensorBytes(b.avgs[staged[k]]);
            sqBytes += tensorBytes(b.sqs[staged[k]]);
          }
          slotBytes = std::max(slotBytes, alignedBytes(avgBytes) + alignedBytes(sqBytes));
        }
        slots = std::make_unique<StagingSlots>(device, slotBytes, chunks.size() > 1 ? 2 : 1);
      }
#endif
      for (const auto& chunk : chunks) {
        const size_t begin = chunk.first, end = chunk.second;  // not bindings: the lambda captures them
        // One copy each way per chunk and moment: the chunk's host moments are packed
        // back to back into one buffer (once; again only if the state was replaced,
        // as a resume does, or the chunk changed). Per-tensor copies of ~1,700 LoRA
        // moments cost more in latency than their bytes do.
        auto span = [&](std::vector<at::Tensor>& host, bool avg) {
          // Copies from pageable memory would wait for the card: a CUDA chunk is pinned.
          const bool pinned = device.is_cuda();
          at::Tensor flat = flatSpan(host, staged, begin, end);
          if (flat.defined() && (!flat.is_cpu() || !pinned || flat.is_pinned())) return flat;
          // Only host moments are packed (moments on another card stay where they are).
          for (size_t k = begin; k < end; ++k)
            if (!host[staged[k]].is_cpu() || host[staged[k]].scalar_type() != host[staged[begin]].scalar_type())
              return at::Tensor();
          packedPinnedMoments = packedPinnedMoments || host[staged[begin]].is_pinned();
          if (avg)
            return packFlat(host, b.states, staged, begin, end, pinned,
                            [](torch::optim::AdamWParamState& st, const at::Tensor& v) { st.exp_avg(v); });
          return packFlat(host, b.states, staged, begin, end, pinned,
                          [](torch::optim::AdamWParamState& st, const at::Tensor& v) { st.exp_avg_sq(v); });
        };
        const at::Tensor flatAvgs = span(b.avgs, true), flatSqs = span(b.sqs, false);
        // Packed host moments on CUDA go through a staging slot (the copies back then on
        // the side stream); anything else through buffers of its own on the compute stream.
        at::Tensor slot;
        int64_t slotOffset = 0;
#ifdef STRATA_HAS_CUDA
        if (slots && flatAvgs.defined() && flatSqs.defined() && flatAvgs.is_cpu() && flatSqs.is_cpu())
          slot = slots->acquire();
#endif
        auto deviceBuffer = [&](const at::Tensor& like) {  // [numel] of like's dtype on `device`
          if (!slot.defined())
            return at::empty(like.sizes(), at::TensorOptions().dtype(like.scalar_type()).device(device));
          const int64_t n = tensorBytes(like);
          at::Tensor d = slot.narrow(0, slotOffset, n).view(like.scalar_type());
          slotOffset += alignedBytes(n);
          return d;
        };
        // Host -> device without blocking (pinned sources); the update queues behind it
        // on the same stream. Returns the staged views and, where the host side is one
        // span, the (span, device buffer) pair for the copy back.
        auto stage = [&](std::vector<at::Tensor>& host, const at::Tensor& flat,
                         std::pair<at::Tensor, at::Tensor>& whole) {
          std::vector<at::Tensor> out;
          if (flat.defined()) {
            at::Tensor d = deviceBuffer(flat);
            d.copy_(flat, /*non_blocking=*/true);
            int64_t offset = 0;
            for (size_t k = begin; k < end; ++k) {
              const at::Tensor& h = host[staged[k]];
              out.push_back(d.narrow(0, offset, h.numel()).view(h.sizes()));
              offset += h.numel();
            }
            whole = {flat, d};
            return out;
          }
          for (size_t k = begin; k < end; ++k) {
            const at::Tensor& h = host[staged[k]];
            at::Tensor d = at::empty(h.sizes(), at::TensorOptions().dtype(h.scalar_type()).device(device));
            d.copy_(h, /*non_blocking=*/true);
            out.push_back(std::move(d));
          }
          return out;
        };
        std::pair<at::Tensor, at::Tensor> wholeAvgs, wholeSqs;
        std::vector<at::Tensor> avgs = stage(b.avgs, flatAvgs, wholeAvgs), sqs = stage(b.sqs, flatSqs, wholeSqs);
        update(pick(b.params, staged, begin, end), pick(b.grads, staged, begin, end), avgs, sqs);
        ++lastStagedChunks_;
#ifdef STRATA_HAS_CUDA
        if (slot.defined()) {
          slots->copyBack({wholeAvgs, wholeSqs});
          continue;
        }
#endif
        auto back = [&](const std::vector<at::Tensor>& host, const std::vector<at::Tensor>& copies,
                        const std::pair<at::Tensor, at::Tensor>& whole) {
          if (whole.first.defined()) {
            copyBack(whole.first, whole.second);
            return;
          }
          for (size_t k = begin; k < end; ++k) copyBack(host[staged[k]], copies[k - begin]);
        };
        back(b.avgs, avgs, wholeAvgs);
        back(b.sqs, sqs, wholeSqs);
      }
#ifdef STRATA_HAS_CUDA
      if (slots) copiesBackPending_.push_back(slots->release());
#endif
    }
  }
  // Blocking: the device has run everything before it, the other copies back included.
  for (auto& [device, last] : lastCopyBack) last.first.copy_(last.second, /*non_blocking=*/false);
  lastCopyBack.clear();
  if (packedPinnedMoments) releaseCachedPinnedMemory();
  lastPath_ = path;
  return loss;
}

}  // namespace strata::train
