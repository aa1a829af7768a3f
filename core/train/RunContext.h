#pragma once
// What a family's side of a run (train::FamilyRun) may see of the trainer's state:
// the config, the bus, the run's devices and plan, the generator and data cursor
// it draws with, the stop request and the phase timer; once its model is placed,
// the placement (its devices, the runner of its blocks) and the LoRA network.
// Nothing else: the family gives its placement back as a value (PlacedModel) and
// its samples as values (train/RunSink.h's Sample), and never writes the run folder.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "events/EventBus.h"
#include "lora/LoraNetwork.h"
#include "placement/Placement.h"
#include "train/RunPlanning.h"
#include "train/Trainer.h"

namespace strata::train {

class PhaseTimer;

// The run's data order: the cursor and skip count are checkpointed; the epoch's
// permutation follows from train.seed and the cursor.
struct DataCursor {
  int64_t drawn = 0;         // items drawn so far (state.json "draw_cursor")
  int64_t skippedItems = 0;  // unreadable items passed over (state.json "skipped_items")
  int64_t permEpoch = -1;
  std::vector<int64_t> perm;
};

// A data-parallel rank's share of the run's one data order. Each micro-batch of
// the run is a global batch of world x batch samples; rank r takes the contiguous
// slice [r x batch, (r + 1) x batch) of it, so its j-th sample is the global
// batch's sample r x batch + j, the same sample (same item, same noise) as in
// one process drawing the whole global batch. One process: rank 0 of 1.
struct DrawShard {
  int64_t rank = 0;
  int64_t world = 1;
  int64_t batch = 1;  // train.batch_size: samples per rank and micro-batch
};
// The position in the run's data order of this rank's draw number `localDrawn`.
int64_t globalDrawPosition(int64_t localDrawn, const DrawShard& shard);

// The next index of the run's data order over `n` items: a permutation per epoch
// from train.seed and the epoch alone, so a resumed run needs only the cursor
// (advanced by one) to draw the same items. Every family draws so. The cursor
// counts this rank's draws; `shard` places them in the order.
size_t nextDrawIndex(DataCursor& cursor, const config::RunConfig& cfg, size_t n, const DrawShard& shard = {});
// The index nextDrawIndex would give next, the cursor unchanged.
size_t peekDrawIndex(const DataCursor& cursor, const config::RunConfig& cfg, size_t n, const DrawShard& shard = {});

// What a sample's random draws are for: each has its own stream.
enum class SampleStream : uint64_t { Noise = 1, CaptionDropout = 2, LoraDropout = 3 };
// The seed of one training sample's random draws: from train.seed, the optimizer
// step (1-based), the sample's index in the step's global batch (over its
// micro-batches and ranks) and the stream. How many ranks share a step, or how
// its samples are batched, changes none of them.
uint64_t sampleSeed(int64_t seed, int64_t step, int64_t globalSample, SampleStream stream);

// What a family's buildAndPlace gives the trainer: its model's blocks placed and
// applied (every block on its device), and why there.
struct PlacedModel {
  std::unique_ptr<placement::Placement> placement;
  std::string reason;  // "single device cpu", the plan's reason, + what the family adds
};

class RunContext {
 public:
  RunContext(Trainer::State& st, const config::RunConfig& cfg, events::EventBus& bus);

  const config::RunConfig& config() const { return cfg_; }
  events::EventBus& bus() const { return bus_; }
  // Preflight's plan: the run's devices, its plan for a split.
  const PreparedRun& prepared() const;
  // The run's CPU generator: seeded or restored before the first micro-batch,
  // checkpointed with the run. A training sample's noise, noise level and caption
  // dropout come from sampleGenerator instead.
  at::Generator& generator() const;
  // A CPU generator for sample `sampleInBatch` of the micro-batch being drawn
  // (FamilyRun::microBatch), seeded by sampleSeed: its global index counts the
  // step's earlier micro-batches and the ranks before this one.
  at::Generator sampleGenerator(int64_t sampleInBatch, SampleStream stream) const;
  // This rank's place in a data-parallel run (rank 0 of 1 in one process).
  DrawShard shard() const;
  DataCursor& cursor() const;
  // Draws the next index of the data order over `n` items (nextDrawIndex).
  size_t nextDrawIndex(size_t n) const;
  // The index the next nextDrawIndex(n) gives (for Dataset::readAhead).
  size_t peekDrawIndex(size_t n) const;
  // The trainer's stop request, for the stages before the first step.
  const std::function<bool()>& stopRequested() const;
  // Throws Interrupted("<where>") when the run was asked to stop (train::stopPoint).
  void stopPoint(const std::string& where) const;
  // TrainerOptions::phaseTimer's timer, or null.
  PhaseTimer* phases() const;

  // Once buildAndPlace has returned. Throw Error before.
  placement::Placement& placement() const;
  nn::BlockRunner* runner() const;  // the placement, or gradient checkpointing over it
  lora::LoraNetwork& network() const;

 private:
  Trainer::State& st_;
  const config::RunConfig& cfg_;
  events::EventBus& bus_;
};

}  // namespace strata::train
