#pragma once
// Training data as latents + text embeddings. Four kinds (datasets[].type):
//   images     a folder of pictures with caption files (train/ImageDataset.h),
//              encoded once into a cache by the run's VAE and text encoders.
//   shapes     the demo: procedurally drawn coloured shapes with captions; the
//              image is turned into latents by a reversible pixel code (below),
//              the caption by WordEmbedder.
//   synthetic  random latents and text embeddings of the model's shapes, for
//              benchmarks and GPU tests without data.
//   latents    a folder of precomputed .safetensors, one per item: "latents"
//              [C, H, W] (or [1, C, H, W]), "txt" [N, D] and "pooled" [D]
//              (diffusers names "prompt_embeds" / "pooled_prompt_embeds" too),
//              optional metadata "caption". An optional "empty_prompt.safetensors"
//              gives the caption-dropout embedding (else zeros).
// Items are produced on demand by index; an unreadable item throws IoError and
// the loader skips it.
#include <ATen/ATen.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/RunConfig.h"
#include "train/TextEmbedder.h"

namespace strata::events {
class EventBus;
}

namespace strata::train {

struct TrainItem {
  at::Tensor latents;  // [C, H, W] float32
  at::Tensor txt;      // [N_txt, D] float32
  at::Tensor pooled;   // [D_pooled] float32
  std::string caption;
};

// ---- the demo's pixel code -------------------------------------------------
// The demo model works in a "latent space" that is the image itself: RGB in
// [0, 1] is mapped to [-1, 1] and every 2x2 pixel patch becomes 12 channels
// (space-to-depth: channel = colour * 4 + dy * 2 + dx); channels 12..15 carry the
// patch's mean luminance (4 copies). Decoding reads channels 0..11 only, so the
// code is exactly invertible. Pixel size = 2 x latent size.
constexpr int64_t kPixelCodeChannels = 16;
constexpr int64_t kPixelCodeScale = 2;
// rgb [3, H, W] in [0, 1] (H, W even) -> latents [16, H/2, W/2].
at::Tensor rgbToLatents(const at::Tensor& rgb);
// latents [C >= 12, h, w] -> rgb [3, 2h, 2w] in [0, 1] (clamped).
at::Tensor latentsToRgb(const at::Tensor& latents);

// A procedurally drawn shapes image: rgb [3, size, size] in [0, 1] and its caption.
struct ShapeImage {
  at::Tensor rgb;
  std::string caption;
};
ShapeImage drawShape(int64_t size, uint64_t seed);

struct Encoders;

// What the datasets need to know about the model.
struct DatasetContext {
  int64_t latentChannels = 16;  // FluxConfig::latentChannels()
  int64_t textTokens = 32;
  int64_t textDim = 4096;  // joint_attention_dim
  int64_t pooledDim = 768;
  int64_t seed = 42;  // train.seed
  // An images dataset: the encoders that fill its cache (diffusion/ImagesRun.h), and
  // where its summary, warnings and cache progress go. Without encoders it is refused.
  const Encoders* encoders = nullptr;
  const events::EventBus* bus = nullptr;
  // The trainer's stop request, polled between cache batches (Encoders::stopRequested).
  std::function<bool()> stopRequested;
  // Items read ahead (Dataset::readAhead) come in page-locked host memory: the copy to
  // the card is then queued at once, instead of a copy into pinned memory on the host
  // while the card waits for the step's data. For runs whose model is on a GPU.
  bool pinReadAhead = false;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual size_t size() const = 0;
  // Throws IoError when the item cannot be read.
  virtual TrainItem item(size_t index) const = 0;
  // A hint: item(index) comes next. A dataset that can reads it now on another
  // thread, while the card runs the step, so the next step's data is ready when the
  // host asks (makeDatasets' datasets do). item() gives the same bytes either way.
  virtual void readAhead(size_t index) const { (void)index; }
  // The caption-dropout embedding.
  virtual TextEmbedding emptyPrompt() const = 0;
  // The shape every item has, as text that two datasets of one run give alike only
  // where their items stack ("latents [16, 64, 64], txt [512, 4096]"), known without
  // reading the items; "" where the items differ or the dataset cannot tell. A run
  // whose items keep one shape draws micro-batches of one shape (train.cuda_graph: auto).
  virtual std::string oneItemShape() const { return ""; }
  // "shapes: 64 items, 32 px"
  virtual std::string describe() const = 0;
};

// One dataset from its config; several are concatenated. makeDatasets' dataset reads
// one item ahead (Dataset::readAhead). Throws ConfigError
// (naming datasets[i].key) for an unusable config, IoError for a missing folder.
std::shared_ptr<Dataset> makeDataset(const config::DatasetConfig& cfg, const DatasetContext& ctx, size_t index);
std::shared_ptr<Dataset> makeDatasets(const std::vector<config::DatasetConfig>& cfgs, const DatasetContext& ctx);

// The largest item of a latents folder, read from the files' headers only (no
// tensor data): what a plan needs. The files are those the latents dataset reads;
// one that is unreadable or not of its shapes (ctx's channels and widths) is skipped
// (counted), as the loader skips it. Throws IoError naming the folder when it cannot be listed or no
// file is usable (with the first file's problem).
struct LatentsFolderShape {
  int64_t files = 0;         // usable files
  int64_t skipped = 0;       // files left out (unreadable or mis-shaped)
  int64_t latentHeight = 0;  // of the file with the most image tokens
  int64_t latentWidth = 0;
  int64_t imageTokens = 0;  // the most over the files: (H/2) x (W/2), FLUX's 2x2 packing
  int64_t textTokens = 0;   // the most over the files: N of 'txt'
};
LatentsFolderShape readLatentsFolderShape(const std::filesystem::path& folder, const DatasetContext& ctx);

// Text tokens of the built-in datasets: 512 (T5's length) for a FLUX.1-dev-wide
// text input (4096), else 16.
int64_t defaultTextTokens(int64_t jointAttentionDim);

}  // namespace strata::train
