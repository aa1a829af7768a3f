#include "dist/AveragingReducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/Error.h"

namespace strata::dist {

namespace {

using torch::autograd::variable_list;

// The first bucket to start is the one the backward fills first, and the last the
// one it fills last: both small, so that the first sum goes out early and the one
// left to run after the backward is short.
constexpr int64_t kEdgeBucketBytes = int64_t(1) << 20;

}  // namespace

struct AveragingReducer::Overlap {
  struct Bucket {
    at::Tensor buffer;            // flat, the members' gradients side by side
    std::vector<size_t> members;  // indices into params
    std::vector<int64_t> offsets;
    size_t waiting = 0;  // members whose gradient has not arrived in this backward
    std::unique_ptr<train::PendingSum> sum;
  };
  std::shared_ptr<train::Collective> collective;
  std::vector<at::Tensor> params;  // the parameters the buckets are for
  std::vector<Bucket> buckets;     // in the order they start: the backward's, last parameters first
  std::vector<size_t> bucketOf;    // per parameter
  std::vector<char> arrived;       // per parameter, in this backward
  // Each parameter's gradient accumulator, held so that it (and the hook on it)
  // is the one every step's autograd graph uses.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> hookKeys;
  std::mutex mutex;
  bool armed = false;
  size_t started = 0;  // buckets started, in bucket order
  std::string error;   // a hook's failure, thrown at reduce()

  bool sameParams(const std::vector<at::Tensor>& p) const {
    if (p.size() != params.size()) return false;
    for (size_t i = 0; i < p.size(); ++i)
      if (!p[i].is_same(params[i])) return false;
    return true;
  }

  // Buckets start strictly in order, so that every rank makes the same calls in
  // the same order whatever order its gradients arrive in (a split model's cards
  // run their backwards on threads of their own). Under the mutex.
  void startReady() {
    while (started < buckets.size() && buckets[started].waiting == 0) {
      Bucket& b = buckets[started];
      try {
        b.sum = collective->startAllReduceSum(b.buffer);
      } catch (const std::exception& e) {
        if (error.empty()) error = e.what();
        return;
      }
      ++started;
    }
  }

  // After parameter i's gradient accumulator has added this backward's gradient
  // into its slot (an autograd thread).
  void arrive(size_t i) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!armed) return;
    Bucket& b = buckets[bucketOf[i]];
    if (arrived[i]) {
      // A second gradient for one parameter in one backward (a parameter used by
      // two checkpointed segments): harmless before its bucket's sum starts,
      // wrong after. The families' adapters are used once; said where not.
      if (bucketOf[i] < started && error.empty())
        error =
            "a LoRA parameter got a second gradient after its bucket's all-reduce had started (a parameter used "
            "in two checkpointed segments?); set STRATA_DIST_OVERLAP=0 to reduce after the backward";
      return;
    }
    arrived[i] = 1;
    if (--b.waiting == 0) startReady();
  }
};

namespace {

class ArrivalHook final : public torch::autograd::FunctionPostHook {
 public:
  ArrivalHook(std::weak_ptr<AveragingReducer::Overlap> overlap, size_t index)
      : overlap_(std::move(overlap)), index_(index) {}
  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    if (auto o = overlap_.lock()) o->arrive(index_);
    return outputs;
  }

 private:
  std::weak_ptr<AveragingReducer::Overlap> overlap_;
  size_t index_;
};

}  // namespace

AveragingReducer::AveragingReducer(std::shared_ptr<train::Collective> collective, bool overlap, int64_t bucketBytes)
    : collective_(std::move(collective)), overlapWanted_(overlap), bucketBytes_(std::max<int64_t>(bucketBytes, 1)) {}

AveragingReducer::~AveragingReducer() { dropOverlap(); }

void AveragingReducer::dropOverlap() {
  if (!overlap_) return;
  for (size_t i = 0; i < overlap_->accumulators.size(); ++i)
    overlap_->accumulators[i]->del_post_hook(overlap_->hookKeys[i]);
  overlap_.reset();
}

int64_t AveragingReducer::buckets() const { return overlap_ ? static_cast<int64_t>(overlap_->buckets.size()) : 0; }

void AveragingReducer::beforeLastBackward(const std::vector<at::Tensor>& params) {
  if (!overlapWanted_ || params.empty()) return;
  if (overlap_ && !overlap_->sameParams(params)) {
    // Other parameters (a resumed network): new buckets for them.
    dropOverlap();
    overlapImpossible_ = false;
    late_.clear();
    lateAgreed_ = false;
  }
  if (overlapImpossible_) return;
  at::NoGradGuard noGrad;
  if (relayout_) {
    dropOverlap();
    relayout_ = false;
  }
  if (!overlap_) {
    // The buckets need one device the collective starts sums on and one dtype.
    const at::Tensor& first = params.front();
    for (const auto& p : params)
      if (p.device() != first.device() || p.scalar_type() != first.scalar_type() || !p.is_leaf() ||
          !p.requires_grad() || !collective_->startsSumsOn(p.device())) {
        overlapImpossible_ = true;
        return;
      }
    auto o = std::make_shared<Overlap>();
    o->collective = collective_;
    o->params = params;
    o->bucketOf.assign(params.size(), 0);
    o->arrived.assign(params.size(), 0);
    late_.resize(params.size(), 0);
    // Last parameters first: the backward reaches the last blocks' adapters first.
    // The late ones after all others.
    std::vector<size_t> order;
    for (size_t k = params.size(); k-- > 0;)
      if (!late_[k]) order.push_back(k);
    const size_t onTime = order.size();
    for (size_t k = params.size(); k-- > 0;)
      if (late_[k]) order.push_back(k);
    const int64_t elementBytes = static_cast<int64_t>(first.element_size());
    const int64_t edge = std::min(kEdgeBucketBytes, bucketBytes_);
    auto bytesOf = [&](size_t n) { return params[order[n]].numel() * elementBytes; };
    // The last on-time bucket: the last parameters up to `edge` bytes (one at least).
    size_t tail = onTime > 1 ? onTime - 1 : onTime;
    for (int64_t tailBytes = tail < onTime ? bytesOf(tail) : 0; tail > 1 && tailBytes + bytesOf(tail - 1) <= edge;)
      tailBytes += bytesOf(--tail);
    int64_t limit = edge;
    int64_t filled = 0;
    for (size_t n = 0; n < order.size(); ++n) {
      const size_t k = order[n];
      const int64_t bytes = bytesOf(n);
      if (o->buckets.empty() || (filled > 0 && filled + bytes > limit) || n == tail || n == onTime) {
        if (!o->buckets.empty()) limit = bucketBytes_;
        o->buckets.emplace_back();
        filled = 0;
      }
      auto& b = o->buckets.back();
      b.offsets.push_back(filled / elementBytes);
      b.members.push_back(k);
      o->bucketOf[k] = o->buckets.size() - 1;
      filled += bytes;
    }
    for (auto& b : o->buckets) {
      int64_t n = 0;
      for (size_t k : b.members) n += params[k].numel();
      b.buffer = at::empty({n}, first.options().requires_grad(false));
    }
    overlap_ = o;
    for (size_t i = 0; i < params.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params[i]);
      if (!acc) {
        dropOverlap();
        overlapImpossible_ = true;
        return;
      }
      o->hookKeys.push_back(acc->add_post_hook(std::make_unique<ArrivalHook>(o, i)));
      o->accumulators.push_back(std::move(acc));
    }
  }
  Overlap& o = *overlap_;
  std::lock_guard<std::mutex> lock(o.mutex);
  for (auto& b : o.buckets) {
    // Earlier micro-batches' gradients go into the slots the backward adds to in place.
    std::vector<at::Tensor> earlier(b.members.size());
    for (size_t m = 0; m < b.members.size(); ++m) {
      const at::Tensor& g = o.params[b.members[m]].grad();
      if (g.defined()) earlier[m] = g.is_alias_of(b.buffer) ? g.clone() : g;
    }
    b.buffer.zero_();
    for (size_t m = 0; m < b.members.size(); ++m) {
      const at::Tensor& p = o.params[b.members[m]];
      at::Tensor slot = b.buffer.narrow(0, b.offsets[m], p.numel()).view(p.sizes());
      if (earlier[m].defined()) slot.copy_(earlier[m]);
      p.mutable_grad() = slot;
    }
    b.waiting = b.members.size();
    b.sum.reset();
  }
  std::fill(o.arrived.begin(), o.arrived.end(), 0);
  o.started = 0;
  o.error.clear();
  o.armed = true;
}

void AveragingReducer::reduce(train::StepGradients& step) {
  if (!overlap_ || !overlap_->armed) {
    reduceAfterBackward(step);
    return;
  }
  Overlap& o = *overlap_;
  {
    std::lock_guard<std::mutex> lock(o.mutex);
    o.armed = false;
    startedDuringBackward_ = static_cast<int64_t>(o.started);
    // What the backward did not reach (an adapter without a gradient this step)
    // takes part as its slot holds it: zeros, or its earlier micro-batches' sum.
    for (auto& b : o.buckets) b.waiting = 0;
    o.startReady();
    if (!o.error.empty()) throw Error("the gradients' all-reduce: " + o.error);
  }
  at::NoGradGuard noGrad;
  const double world = static_cast<double>(collective_->worldSize());
  for (auto& b : o.buckets) {
    b.sum->wait();
    b.sum.reset();
    b.buffer.div_(world);
  }
  if (!lateAgreed_) {
    // Once: the parameters no rank's backward reached, agreed over the ranks; the
    // next step's buckets keep them out of the way of the others.
    std::vector<float> missedHere(o.params.size());
    for (size_t i = 0; i < o.params.size(); ++i) missedHere[i] = o.arrived[i] ? 0.0f : 1.0f;
    std::vector<at::Tensor> missed{
        at::from_blob(missedHere.data(), {static_cast<int64_t>(missedHere.size())}, at::kFloat).clone()};
    collective_->allReduceSum(missed);
    lateAgreed_ = true;
    const at::Tensor ranksMissing = missed[0].contiguous();
    const float* count = ranksMissing.data_ptr<float>();
    bool any = false;
    for (size_t i = 0; i < o.params.size(); ++i) {
      // Missed by some rank: its arrival depends on the data, so it waits at the end.
      late_[i] = count[i] > 0.0f ? 1 : 0;
      any = any || late_[i];
    }
    relayout_ = any;
  }
  for (const auto& b : o.buckets)
    for (size_t m = 0; m < b.members.size(); ++m) {
      const at::Tensor& g = o.params[b.members[m]].grad();
      // The accumulators add in place into a gradient that exists; one that replaced
      // it would leave the parameter with an unreduced gradient.
      if (!g.defined() || !g.is_alias_of(b.buffer))
        throw Error("the gradients' all-reduce: parameter " + std::to_string(b.members[m]) +
                    "'s gradient was replaced during the backward, not accumulated into its bucket");
    }
  reduceLosses(step.losses);
}

void AveragingReducer::reduceAfterBackward(train::StepGradients& step) {
  const double world = static_cast<double>(collective_->worldSize());
  at::NoGradGuard noGrad;
  // The gradients packed into one flat buffer per device and dtype (a split model
  // has its LoRA on several cards), in the parameters' order: the same buffers on
  // every rank. After the sum each gradient becomes a view of its buffer, so the
  // reduce costs one concatenation, the collective and one division per buffer
  // instead of a copy and a division per parameter (FLUX.1 has ~800).
  std::vector<std::pair<std::pair<std::string, int>, std::vector<size_t>>> groups;
  for (size_t i = 0; i < step.params.size(); ++i) {
    const at::Tensor& p = step.params[i];
    // A parameter without a gradient on this rank takes part as zeros, so every
    // rank packs the same buffers.
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    const std::pair<std::string, int> key{p.device().str(), static_cast<int>(p.scalar_type())};
    auto at = std::find_if(groups.begin(), groups.end(), [&key](const auto& g) { return g.first == key; });
    if (at == groups.end()) at = groups.insert(groups.end(), {key, {}});
    at->second.push_back(i);
  }
  std::vector<at::Tensor> buffers;
  for (const auto& group : groups) {
    std::vector<at::Tensor> flat;
    for (size_t i : group.second) flat.push_back(step.params[i].grad().reshape({-1}));
    buffers.push_back(at::cat(flat));
  }
  collective_->allReduceSum(buffers);
  for (size_t g = 0; g < groups.size(); ++g) {
    at::Tensor& buffer = buffers[g];
    buffer.div_(world);
    int64_t offset = 0;
    for (size_t i : groups[g].second) {
      const at::Tensor& p = step.params[i];
      const int64_t n = p.numel();
      p.mutable_grad() = buffer.narrow(0, offset, n).view(p.sizes());
      offset += n;
    }
  }
  reduceLosses(step.losses);
}

void AveragingReducer::reduceLosses(std::vector<at::Tensor>& losses) {
  if (losses.empty()) return;
  const double world = static_cast<double>(collective_->worldSize());
  at::NoGradGuard noGrad;
  // Each micro-batch's loss is replaced by its average. Kept on their device:
  // reading them on the host here would wait for the step's work, which the
  // trainer's queued optimizer step avoids.
  std::vector<at::Tensor> flat;
  const c10::Device device = losses.front().device();
  for (const auto& l : losses) flat.push_back(l.detach().to(device, at::kDouble).reshape({1}));
  std::vector<at::Tensor> buffer{at::cat(flat)};
  collective_->allReduceSum(buffer);
  buffer[0].div_(world);
  for (size_t m = 0; m < losses.size(); ++m) {
    const at::Tensor& was = losses[m];
    losses[m] = buffer[0][static_cast<int64_t>(m)].to(was.device(), was.scalar_type()).reshape(was.sizes());
  }
}

}  // namespace strata::dist
