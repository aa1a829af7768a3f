#include "train/RunContext.h"

#include <algorithm>

#include "common/Error.h"
#include "train/RngState.h"
#include "train/TrainerSupport.h"

namespace strata::train {

int64_t globalDrawPosition(int64_t localDrawn, const DrawShard& shard) {
  const int64_t batch = std::max<int64_t>(shard.batch, 1);
  return (localDrawn / batch) * shard.world * batch + shard.rank * batch + localDrawn % batch;
}

namespace {

// The item at `position` of the run's data order; the epoch's permutation kept in the cursor.
size_t drawAt(DataCursor& cursor, const config::RunConfig& cfg, size_t n, int64_t position) {
  if (n == 0) throw Error("the run's data is empty: nothing to draw");
  const auto count = static_cast<int64_t>(n);
  const int64_t epoch = position / count;
  if (epoch != cursor.permEpoch) {
    // The order of an epoch depends only on the seed and the epoch.
    auto g = makeCpuGenerator(static_cast<uint64_t>(cfg.train.seed) * 1000003ull + static_cast<uint64_t>(epoch));
    auto p = at::randperm(count, g, at::kLong);
    cursor.perm.assign(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + count);
    cursor.permEpoch = epoch;
  }
  return static_cast<size_t>(cursor.perm[static_cast<size_t>(position % count)]);
}

// splitmix64's finaliser: every input bit moves every output bit.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

size_t nextDrawIndex(DataCursor& cursor, const config::RunConfig& cfg, size_t n, const DrawShard& shard) {
  const size_t index = drawAt(cursor, cfg, n, globalDrawPosition(cursor.drawn, shard));
  ++cursor.drawn;
  return index;
}

size_t peekDrawIndex(const DataCursor& cursor, const config::RunConfig& cfg, size_t n, const DrawShard& shard) {
  const int64_t position = globalDrawPosition(cursor.drawn, shard);
  const auto count = static_cast<int64_t>(n);
  if (count > 0 && position / count == cursor.permEpoch)
    return static_cast<size_t>(cursor.perm[static_cast<size_t>(position % count)]);
  DataCursor next;  // a new epoch's first draw makes its permutation, here in a scratch cursor
  return drawAt(next, cfg, n, position);
}

uint64_t sampleSeed(int64_t seed, int64_t step, int64_t globalSample, SampleStream stream) {
  uint64_t h = mix(static_cast<uint64_t>(seed));
  h = mix(h ^ static_cast<uint64_t>(step));
  h = mix(h ^ static_cast<uint64_t>(globalSample));
  return mix(h ^ static_cast<uint64_t>(stream));
}

RunContext::RunContext(Trainer::State& st, const config::RunConfig& cfg, events::EventBus& bus)
    : st_(st), cfg_(cfg), bus_(bus) {}

const PreparedRun& RunContext::prepared() const { return st_.prepared; }
at::Generator& RunContext::generator() const { return st_.gen; }
DataCursor& RunContext::cursor() const { return st_.cursor; }
size_t RunContext::nextDrawIndex(size_t n) const { return train::nextDrawIndex(st_.cursor, cfg_, n, shard()); }
size_t RunContext::peekDrawIndex(size_t n) const { return train::peekDrawIndex(st_.cursor, cfg_, n, shard()); }

DrawShard RunContext::shard() const {
  DrawShard s;
  s.batch = std::max<int64_t>(cfg_.train.batchSize, 1);
  if (st_.collective) {
    s.rank = st_.collective->rank();
    s.world = st_.collective->worldSize();
  }
  return s;
}

at::Generator RunContext::sampleGenerator(int64_t sampleInBatch, SampleStream stream) const {
  const DrawShard s = shard();
  const int64_t globalSample = (st_.drawMicroBatch * s.world + s.rank) * s.batch + sampleInBatch;
  return makeCpuGenerator(sampleSeed(cfg_.train.seed, st_.drawStep, globalSample, stream));
}
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
