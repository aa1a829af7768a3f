#include "train/RunContext.h"

#include "common/Error.h"
#include "train/RngState.h"
#include "train/TrainerSupport.h"

namespace strata::train {

size_t nextDrawIndex(DataCursor& cursor, const config::RunConfig& cfg, size_t n) {
  if (n == 0) throw Error("the run's data is empty: nothing to draw");
  const auto count = static_cast<int64_t>(n);
  const int64_t epoch = cursor.drawn / count;
  const int64_t pos = cursor.drawn % count;
  ++cursor.drawn;
  if (epoch != cursor.permEpoch) {
    // The order of an epoch depends only on the seed and the epoch.
    auto g = makeCpuGenerator(static_cast<uint64_t>(cfg.train.seed) * 1000003ull + static_cast<uint64_t>(epoch));
    auto p = at::randperm(count, g, at::kLong);
    cursor.perm.assign(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + count);
    cursor.permEpoch = epoch;
  }
  return static_cast<size_t>(cursor.perm[static_cast<size_t>(pos)]);
}

size_t peekDrawIndex(const DataCursor& cursor, const config::RunConfig& cfg, size_t n) {
  if (n == 0) throw Error("the run's data is empty: nothing to draw");
  const auto count = static_cast<int64_t>(n);
  if (cursor.drawn / count == cursor.permEpoch)
    return static_cast<size_t>(cursor.perm[static_cast<size_t>(cursor.drawn % count)]);
  DataCursor next = cursor;  // a new epoch's first draw makes its permutation
  return nextDrawIndex(next, cfg, n);
}

RunContext::RunContext(Trainer::State& st, const config::RunConfig& cfg, events::EventBus& bus)
    : st_(st), cfg_(cfg), bus_(bus) {}

const PreparedRun& RunContext::prepared() const { return st_.prepared; }
at::Generator& RunContext::generator() const { return st_.gen; }
DataCursor& RunContext::cursor() const { return st_.cursor; }
size_t RunContext::nextDrawIndex(size_t n) const { return train::nextDrawIndex(st_.cursor, cfg_, n); }
size_t RunContext::peekDrawIndex(size_t n) const { return train::peekDrawIndex(st_.cursor, cfg_, n); }
const std::function<bool()>& RunContext::stopRequested() const { return st_.stopRequested; }
void RunContext::stopPoint(const std::string& where) const { train::stopPoint(st_, where); }
PhaseTimer* RunContext::phases() const { return st_.phases; }

placement::Placement& RunContext::placement() const {
  if (!st_.placement) throw Error("RunContext: the model is not placed yet");
  return *st_.placement;
}

nn::BlockRunner* RunContext::runner() const {
  if (!st_.runner) throw Error("RunContext: the model is not placed yet");
  return st_.runner;
}

lora::LoraNetwork& RunContext::network() const {
  if (!st_.network) throw Error("RunContext: the LoRA network is not attached yet");
  return *st_.network;
}

}  // namespace strata::train
