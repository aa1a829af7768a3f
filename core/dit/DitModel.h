#pragma once
// The double/single stack every DiT here is: a stem, double blocks
// ("transformer_blocks.N"), single blocks ("single_transformer_blocks.N") and a
// head, every block an nn::Block over BlockIO. A model (FLUX.1, FLUX.2) builds its
// stem, calls buildBlocks with its block classes, builds its head, and sets the
// stem's and head's modules; the block list, the loop over blocks and the block
// accessors are this class's, so the two models cannot drift apart in them.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dit/DitLayers.h"
#include "nn/Block.h"
#include "nn/Linear.h"

namespace strata::dit {

class DitModel : public torch::nn::Module, public nn::BlockModel {
 public:
  nn::BlockList blockList() override;

  size_t blockCount() const { return blocks_.size(); }
  std::shared_ptr<nn::Block> block(size_t i) const { return blocks_.at(i); }

  // Module paths of every nn::Linear in the model, with the module (forward order).
  std::vector<std::pair<std::string, nn::Linear>> linears();

 protected:
  using MakeBlock = std::function<std::shared_ptr<nn::Block>(const BuildOptions&)>;
  // Registers "transformer_blocks" and "single_transformer_blocks" and builds the
  // blocks in order, each on its own device (options.blockDevice) and handed to
  // options.onBlockBuilt before the next one exists.
  void buildBlocks(int64_t numLayers, int64_t numSingleLayers, const BuildOptions& options, const MakeBlock& makeDouble,
                   const MakeBlock& makeSingle);
  // runner->run(i, block, io) for every block, then runner->toHead (runner null: local).
  nn::BlockIO runBlocks(nn::BlockIO io, nn::BlockRunner* runner);

  std::vector<nn::NamedModule> stemModules_;  // the stem's top-level modules, for placement
  std::vector<nn::NamedModule> headModules_;  // the head's

 private:
  torch::nn::ModuleList doubleBlocks_{nullptr};
  torch::nn::ModuleList singleBlocks_{nullptr};
  std::vector<std::shared_ptr<nn::Block>> blocks_;  // double, then single
  int64_t numLayers_ = 0;
};

// A DiT with its config and forward inputs: stem -> the blocks (runBlocks) -> head.
// The embedder and head Linears both models have live here; a model builds them.
template <class Config, class Inputs>
class DitTransformer : public DitModel {
 public:
  // stem -> runner->run(i, block, io) for every block -> runner->toHead -> head.
  // Output: [B, N_img, out_channels] (the flow velocity). Runner null = local.
  at::Tensor forward(const Inputs& in, nn::BlockRunner* runner = nullptr) { return head(runBlocks(stem(in), runner)); }

  // The pieces, for runners and tests: embeddings, conditioning and the rotary tables;
  // and norm_out + proj_out.
  virtual nn::BlockIO stem(const Inputs& in) = 0;
  virtual at::Tensor head(const nn::BlockIO& io) = 0;

  const Config& config() const { return cfg_; }
  // Dtype of the parameters (of x_embedder); inputs are cast to it.
  at::ScalarType dtype() const { return xEmbedder->weight.scalar_type(); }

  nn::Linear xEmbedder{nullptr};        // x_embedder
  nn::Linear contextEmbedder{nullptr};  // context_embedder
  nn::Linear normOutLinear{nullptr};    // norm_out.linear: (scale, shift)
  nn::Linear projOut{nullptr};          // proj_out

 protected:
  explicit DitTransformer(const Config& cfg) : cfg_(cfg) { cfg_.validate(); }

  Config cfg_;
};

}  // namespace strata::dit
