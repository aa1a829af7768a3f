#pragma once
// The neutral block interface shared by models and placement (docs/design.md §2.0).
// To placement a model is a stem, an ordered list of blocks and a head; it never
// includes a model family, and a model never moves itself.
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "nn/BlockIO.h"

namespace strata::nn {

// A transformer block: BlockIO in, BlockIO out.
class Block : public torch::nn::Module {
 public:
  virtual BlockIO forward(const BlockIO& io) = 0;
};

// A module of the model and its path in the model's state dict ("x_embedder").
struct NamedModule {
  std::string path;
  std::shared_ptr<torch::nn::Module> module;
};

// One placement unit. `id` is the module path of a block ("transformer_blocks.3")
// or "stem" / "head" for the modules outside the blocks.
struct BlockSlot {
  std::string id;
  std::string kind;                  // "stem", "head", or the family's block kind: "double", "single", "layer"
  std::vector<NamedModule> modules;  // a block has one: itself
  std::shared_ptr<Block> block;      // null for stem and head
};

struct BlockList {
  BlockSlot stem;
  std::vector<BlockSlot> blocks;  // in forward order
  BlockSlot head;
};

// Runs the blocks of a forward pass. A model calls `run` for every block in
// order and `toHead` before its head; placement installs a runner that relays
// BlockIO to each block's device, training adds activation checkpointing.
class BlockRunner {
 public:
  virtual ~BlockRunner() = default;
  virtual BlockIO run(size_t blockIndex, Block& block, const BlockIO& in) = 0;
  virtual BlockIO toHead(const BlockIO& io) { return io; }
};

// Calls each block in place, no relay: the one-device runner.
class LocalRunner final : public BlockRunner {
 public:
  BlockIO run(size_t, Block& block, const BlockIO& in) override { return block.forward(in); }
};

// What placement needs from a model family.
class BlockModel {
 public:
  virtual ~BlockModel() = default;
  virtual BlockList blockList() = 0;
};

}  // namespace strata::nn
