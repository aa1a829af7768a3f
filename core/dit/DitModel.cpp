#include "dit/DitModel.h"

#include "dit/ModuleSpec.h"

namespace strata::dit {

void DitModel::buildBlocks(int64_t numLayers, int64_t numSingleLayers, const BuildOptions& o,
                           const MakeBlock& makeDouble, const MakeBlock& makeSingle) {
  numLayers_ = numLayers;
  // The options of block i: its own device when the blocks are split.
  auto blockOptions = [&o](size_t i) {
    BuildOptions bo = o;
    if (o.blockDevice) bo.device = o.blockDevice(i);
    return bo;
  };
  // Blocks in order: built, handed to the hook, registered, before the next one exists.
  auto build = [&](torch::nn::ModuleList& list, int64_t count, const MakeBlock& make) {
    for (int64_t i = 0; i < count; ++i) {
      auto b = make(blockOptions(blocks_.size()));
      if (o.onBlockBuilt) o.onBlockBuilt(*b);
      list->push_back(b);
      blocks_.push_back(b);
    }
  };
  doubleBlocks_ = register_module("transformer_blocks", torch::nn::ModuleList());
  build(doubleBlocks_, numLayers, makeDouble);
  singleBlocks_ = register_module("single_transformer_blocks", torch::nn::ModuleList());
  build(singleBlocks_, numSingleLayers, makeSingle);
}

nn::BlockIO DitModel::runBlocks(nn::BlockIO io, nn::BlockRunner* runner) {
  nn::LocalRunner local;
  if (!runner) runner = &local;
  for (size_t i = 0; i < blocks_.size(); ++i) io = runner->run(i, *blocks_[i], io);
  return runner->toHead(io);
}

nn::BlockList DitModel::blockList() {
  nn::BlockList list;
  list.stem.id = "stem";
  list.stem.kind = "stem";
  list.stem.modules = stemModules_;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const bool isDouble = static_cast<int64_t>(i) < numLayers_;
    const std::string id = isDouble ? blockId(Unit::Double, static_cast<int64_t>(i))
                                    : blockId(Unit::Single, static_cast<int64_t>(i) - numLayers_);
    list.blocks.push_back({id, isDouble ? "double" : "single", {{id, blocks_[i]}}, blocks_[i]});
  }
  list.head.id = "head";
  list.head.kind = "head";
  list.head.modules = headModules_;
  return list;
}

std::vector<std::pair<std::string, nn::Linear>> DitModel::linears() {
  std::vector<std::pair<std::string, nn::Linear>> out;
  for (const auto& item : named_modules("", /*include_self=*/false)) {
    if (auto lin = std::dynamic_pointer_cast<nn::LinearImpl>(item.value()))
      out.emplace_back(item.key(), nn::Linear(lin));
  }
  return out;
}

}  // namespace strata::dit
