#pragma once
// The reduce point of a data-parallel run (train/GradientReducer.h): every LoRA
// gradient and every micro-batch loss averaged over the ranks, once per optimizer
// step (with gradient accumulation, at its boundary only). Each rank's gradient
// and losses are the means over its share of the global batch, which is the same
// size on every rank, so their average is the global batch's: the step is the one
// a single process would take on the whole batch. A non-finite value on any rank
// makes the average non-finite on all, so every rank takes the same decision.
//
// Overlapped with the backward where the step allows it (an eager last
// micro-batch, every LoRA parameter on one device the collective starts sums on):
// the gradients accumulate into flat buckets, and each bucket's sum starts as soon
// as its last gradient has arrived, while the backward goes on with the blocks
// before it. A replayed step graph, or LoRA split over cards, is summed after the
// backward in one buffer per device.
#include <cstdint>
#include <memory>

#include "train/Collective.h"
#include "train/GradientReducer.h"

namespace strata::dist {

class AveragingReducer final : public train::GradientReducer {
 public:
  // 25 MiB buckets as DDP's (the first and the last small: the first sum starts
  // early, and the one left after the backward is short).
  static constexpr int64_t kBucketBytes = int64_t(25) << 20;
  AveragingReducer(std::shared_ptr<train::Collective> collective, bool overlap = true,
                   int64_t bucketBytes = kBucketBytes);
  ~AveragingReducer() override;
  void beforeLastBackward(const std::vector<at::Tensor>& params) override;
  void reduce(train::StepGradients& step) override;
  // Buckets whose sum started before reduce() in the last overlapped step, of how
  // many (for tests and measurements).
  int64_t startedDuringBackward() const { return startedDuringBackward_; }
  int64_t buckets() const;
  struct Overlap;  // the buckets and their hooks (AveragingReducer.cpp)

 private:
  void reduceAfterBackward(train::StepGradients& step);
  void reduceLosses(std::vector<at::Tensor>& losses);
  void dropOverlap();

  std::shared_ptr<train::Collective> collective_;
  bool overlapWanted_;
  int64_t bucketBytes_;
  std::shared_ptr<Overlap> overlap_;  // the buckets of the parameters it was made for
  bool overlapImpossible_ = false;    // for those parameters: not tried again
  // Parameters no rank's backward reached in the first overlapped step (agreed
  // over the ranks, so every rank lays out the same buckets): they go into a
  // bucket of their own at the end, where they hold back no other bucket's start.
  std::vector<char> late_;
  bool lateAgreed_ = false;
  bool relayout_ = false;  // late ones found: new buckets at the next step
  int64_t startedDuringBackward_ = 0;
};

}  // namespace strata::dist
