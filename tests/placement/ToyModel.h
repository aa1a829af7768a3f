#pragma once
// A small BlockModel for placement tests: a stem Linear, N blocks of nn::Linear
// (image and text streams, so the relay must carry both), a head Linear. Every
// Linear is an nn::Linear, so LoRA adapters attach to it like to FLUX's.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "lora/LoraAdapter.h"
#include "nn/Block.h"
#include "nn/Linear.h"

namespace strata::test {

// Blocks without parameters (Module::to is then a no-op even to meta), so the
// attachment moves of a placement can be followed on a cpu-only machine.
class EmptyBlock : public nn::Block {
 public:
  nn::BlockIO forward(const nn::BlockIO& io) override { return io; }
};

// A stem and a head without modules around n EmptyBlocks "blocks.0" .. "blocks.<n-1>".
inline nn::BlockList emptyBlocks(size_t n) {
  nn::BlockList list;
  list.stem = nn::BlockSlot{"stem", "stem", {}, nullptr};
  for (size_t i = 0; i < n; ++i) {
    auto b = std::make_shared<EmptyBlock>();
    const std::string id = "blocks." + std::to_string(i);
    list.blocks.push_back(nn::BlockSlot{id, "layer", {{id, b}}, b});
  }
  list.head = nn::BlockSlot{"head", "head", {}, nullptr};
  return list;
}

class ToyBlock : public nn::Block {
 public:
  explicit ToyBlock(int64_t dim) {
    fc1 = register_module("fc1", nn::Linear(dim, 2 * dim));
    fc2 = register_module("fc2", nn::Linear(2 * dim, dim));
    txtProj = register_module("txt_proj", nn::Linear(dim, dim));
    scale = register_buffer("scale", at::ones({dim}));
  }
  nn::BlockIO forward(const nn::BlockIO& io) override {
    nn::BlockIO out = io;
    // img: [B, N, D]; text mixes in through its mean over tokens: [B, 1, D]
    at::Tensor h = fc2->forward(at::gelu(fc1->forward(io.img)));
    out.img = io.img + h * scale + io.txt.mean(1, /*keepdim=*/true) + io.temb.unsqueeze(1);
    out.txt = io.txt + txtProj->forward(io.txt);
    return out;
  }
  nn::Linear fc1{nullptr}, fc2{nullptr}, txtProj{nullptr};
  at::Tensor scale;
};

class ToyModel : public torch::nn::Module, public nn::BlockModel {
 public:
  ToyModel(int64_t inDim, int64_t dim, int64_t numBlocks) {
    xEmbedder = register_module("x_embedder", nn::Linear(inDim, dim));
    blocksList = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < numBlocks; ++i) {
      auto b = std::make_shared<ToyBlock>(dim);
      blocksList->push_back(b);
      blocks.push_back(b);
    }
    projOut = register_module("proj_out", nn::Linear(dim, inDim));
  }

  nn::BlockList blockList() override {
    nn::BlockList list;
    list.stem = nn::BlockSlot{"stem", "stem", {{"x_embedder", xEmbedder.ptr()}}, nullptr};
    for (size_t i = 0; i < blocks.size(); ++i) {
      const std::string id = "blocks." + std::to_string(i);
      list.blocks.push_back(nn::BlockSlot{id, "layer", {{id, blocks[i]}}, blocks[i]});
    }
    list.head = nn::BlockSlot{"head", "head", {{"proj_out", projOut.ptr()}}, nullptr};
    return list;
  }

  // x: [B, N, in], txt: [B, T, D], temb: [B, D] -> [B, N, in]
  at::Tensor forward(const at::Tensor& x, const at::Tensor& txt, const at::Tensor& temb, nn::BlockRunner& runner) {
    nn::BlockIO io;
    io.img = xEmbedder->forward(x);  // [B, N, D]
    io.txt = txt;
    io.temb = temb;
    for (size_t i = 0; i < blocks.size(); ++i) io = runner.run(i, *blocks[i], io);
    io = runner.toHead(io);
    return projOut->forward(io.img);
  }

  // Every nn::Linear inside the blocks, by module path.
  std::vector<std::pair<std::string, std::shared_ptr<nn::LinearImpl>>> blockLinears() {
    std::vector<std::pair<std::string, std::shared_ptr<nn::LinearImpl>>> out;
    for (const auto& item : named_modules("", /*include_self=*/false)) {
      if (item.key().rfind("blocks.", 0) != 0) continue;
      if (auto lin = std::dynamic_pointer_cast<nn::LinearImpl>(item.value())) {
        out.emplace_back(item.key(), lin);
      }
    }
    return out;
  }

  nn::Linear xEmbedder{nullptr}, projOut{nullptr};
  torch::nn::ModuleList blocksList{nullptr};
  std::vector<std::shared_ptr<ToyBlock>> blocks;
};

// Records the device of every BlockIO field it receives.
class RecordingBlock : public nn::Block {
 public:
  nn::BlockIO forward(const nn::BlockIO& io) override {
    seen.clear();
    for (const auto& f : io.fields()) seen.push_back(f.defined() ? f.device().str() : "undefined");
    return io;
  }
  std::vector<std::string> seen;
};

// Copies every parameter and buffer of `from` into `to` (same architecture).
inline void copyWeights(torch::nn::Module& from, torch::nn::Module& to) {
  at::NoGradGuard noGrad;
  auto src = from.named_parameters(true);
  for (auto& p : to.named_parameters(true)) p.value().copy_(src[p.key()]);
  auto srcB = from.named_buffers(true);
  for (auto& b : to.named_buffers(true)) b.value().copy_(srcB[b.key()]);
}

// A real LoRA adapter on every Linear of the model's blocks, on its host's
// device, with the attachment Placement registers for it.
struct ToyAdapters {
  std::vector<std::shared_ptr<lora::LoraAdapter>> adapters;
  std::vector<std::shared_ptr<placement::Attachment>> attachments;
  std::vector<std::pair<std::string, at::Tensor>> namedParams() const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& a : adapters) {
      out.emplace_back(a->hostPath() + ".lora_A.weight", a->down);
      out.emplace_back(a->hostPath() + ".lora_B.weight", a->up);
    }
    return out;
  }
};

inline ToyAdapters addToyAdapters(ToyModel& model, int64_t rank,
                                  std::shared_ptr<const lora::LoraMultiplier> mult = nullptr) {
  ToyAdapters out;
  for (auto& [path, lin] : model.blockLinears()) {
    auto a = std::make_shared<lora::LoraAdapter>(path, lin, rank, static_cast<double>(rank), 0.0, mult);
    lin->addAdapter(a);
    out.adapters.push_back(a);
    out.attachments.push_back(std::make_shared<lora::LoraAttachment>(a));
  }
  return out;
}

}  // namespace strata::test
