#include "train/Datasets.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <future>
#include <map>
#include <mutex>
#include <random>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "io/FileBytes.h"
#include "io/Safetensors.h"
#include "train/ImageDataset.h"

namespace strata::train {

namespace fs = std::filesystem;

// ---- pixel code ----------------------------------------------------------------

at::Tensor rgbToLatents(const at::Tensor& rgb) {
  if (rgb.dim() != 3 || rgb.size(0) != 3 || rgb.size(1) % 2 || rgb.size(2) % 2)
    throw Error("rgbToLatents: expected [3, H, W] with even H and W");
  const int64_t h = rgb.size(1) / 2, w = rgb.size(2) / 2;
  auto x = rgb.to(at::kFloat) * 2 - 1;
  // [3, h, 2, w, 2] -> [3, 2, 2, h, w] -> [12, h, w]
  auto patches = x.view({3, h, 2, w, 2}).permute({0, 2, 4, 1, 3}).reshape({12, h, w});
  auto luma = (0.299 * patches.slice(0, 0, 4).mean(0) + 0.587 * patches.slice(0, 4, 8).mean(0) +
               0.114 * patches.slice(0, 8, 12).mean(0));                           // [h, w]
  return at::cat({patches, luma.unsqueeze(0).expand({4, h, w})}, 0).contiguous();  // [16, h, w]
}

at::Tensor latentsToRgb(const at::Tensor& latents) {
  if (latents.dim() != 3 || latents.size(0) < 12) throw Error("latentsToRgb: expected [C >= 12, h, w]");
  const int64_t h = latents.size(1), w = latents.size(2);
  auto p = latents.slice(0, 0, 12).to(at::kFloat).view({3, 2, 2, h, w});
  auto rgb = p.permute({0, 3, 1, 4, 2}).reshape({3, 2 * h, 2 * w});  // [3, 2h, 2w]
  return ((rgb + 1) * 0.5).clamp(0, 1);
}

ShapeImage drawShape(int64_t size, uint64_t seed) {
  struct Colour {
    const char* name;
    float r, g, b;
  };
  static const Colour kColours[] = {{"red", 0.9f, 0.1f, 0.1f},      {"green", 0.1f, 0.8f, 0.2f},
                                    {"blue", 0.15f, 0.3f, 0.95f},   {"yellow", 0.95f, 0.9f, 0.1f},
                                    {"magenta", 0.9f, 0.2f, 0.85f}, {"cyan", 0.1f, 0.85f, 0.9f}};
  static const char* kShapes[] = {"circle", "square", "triangle", "ring"};
  std::mt19937_64 rng(seed);
  auto uni = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  const auto& c = kColours[rng() % 6];
  const char* shape = kShapes[rng() % 4];
  const bool dark = rng() % 2 == 0;
  const double s = static_cast<double>(size);
  const double radius = uni(0.2, 0.32) * s;
  const double cx = uni(radius, s - radius), cy = uni(radius, s - radius);

  auto coords = at::arange(size, at::kFloat) + 0.5f;
  auto ys = coords.view({size, 1}).expand({size, size});
  auto xs = coords.view({1, size}).expand({size, size});
  auto dx = xs - cx, dy = ys - cy;
  at::Tensor mask;
  const std::string name = shape;
  if (name == "circle") {
    mask = (dx * dx + dy * dy) <= radius * radius;
  } else if (name == "square") {
    const double half = radius * 0.85;
    mask = (dx.abs() <= half) & (dy.abs() <= half);
  } else if (name == "triangle") {
    // Apex up: inside when below the two slanted edges and above the base.
    const double top = cy - radius, base = cy + radius * 0.8;
    auto t = (ys - top) / (base - top);  // 0 at apex, 1 at the base
    mask = (t >= 0) & (t <= 1) & (dx.abs() <= t * radius);
  } else {
    auto d2 = dx * dx + dy * dy;
    mask = (d2 <= radius * radius) & (d2 >= 0.36 * radius * radius);
  }
  const float bg = dark ? 0.1f : 0.85f;
  auto rgb = at::full({3, size, size}, bg, at::kFloat);
  const float col[3] = {c.r, c.g, c.b};
  for (int i = 0; i < 3; ++i) rgb[i].masked_fill_(mask, col[i]);
  ShapeImage out;
  out.rgb = rgb;
  out.caption = std::string("a ") + c.name + " " + shape + " on a " + (dark ? "dark" : "light") + " background";
  return out;
}

int64_t defaultTextTokens(int64_t jointAttentionDim) { return jointAttentionDim >= 4096 ? 512 : 16; }

namespace {

// Dataset::oneItemShape's text: the latents' shape and the text embedding's.
std::string itemShapeText(const std::vector<int64_t>& latents, const TextEmbedding& text) {
  return "latents " + shapeText(latents) + ", txt " + shapeText(text.txt.sizes()) + ", pooled " +
         (text.pooled.defined() ? shapeText(text.pooled.sizes()) : std::string("none"));
}

std::string key(size_t index, const std::string& k) { return "datasets[" + std::to_string(index) + "]." + k; }

int64_t firstResolution(const config::DatasetConfig& cfg, size_t index) {
  if (cfg.resolution.empty()) throw ConfigError(key(index, "resolution") + ": needs at least one size");
  return cfg.resolution.front();
}

class ShapesDataset final : public Dataset {
 public:
  ShapesDataset(const config::DatasetConfig& cfg, const DatasetContext& ctx, size_t index)
      : embedder_(ctx.textTokens, ctx.textDim, ctx.pooledDim), seed_(static_cast<uint64_t>(ctx.seed)) {
    size_ = firstResolution(cfg, index);
    if (size_ % (2 * kPixelCodeScale) != 0 || size_ < 8)
      throw ConfigError(key(index, "resolution") + ": shapes needs a multiple of 4 of at least 8, got " +
                        std::to_string(size_));
    if (ctx.latentChannels != kPixelCodeChannels)
      throw ConfigError(key(index, "type") + ": shapes needs a model with 16 latent channels (in_channels 64)");
    if (cfg.numItems < 1) throw ConfigError(key(index, "num_items") + ": must be at least 1");
    count_ = static_cast<size_t>(cfg.numItems);
  }
  size_t size() const override { return count_; }
  TrainItem item(size_t i) const override {
    const auto img = drawShape(size_, seed_ * 1000003ull + i);
    TrainItem it;
    it.latents = rgbToLatents(img.rgb);
    auto e = embedder_.embed(img.caption);
    it.txt = e.txt;
    it.pooled = e.pooled;
    it.caption = img.caption;
    return it;
  }
  TextEmbedding emptyPrompt() const override { return embedder_.embed(""); }
  std::string describe() const override {
    return "shapes: " + std::to_string(count_) + " items, " + std::to_string(size_) + " px";
  }
  std::string oneItemShape() const override {
    const int64_t side = size_ / kPixelCodeScale;
    return itemShapeText({kPixelCodeChannels, side, side}, embedder_.embed(""));
  }

 private:
  WordEmbedder embedder_;
  uint64_t seed_;
  int64_t size_ = 32;
  size_t count_ = 64;
};

class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(const config::DatasetConfig& cfg, const DatasetContext& ctx, size_t index) : ctx_(ctx) {
    const int64_t px = firstResolution(cfg, index);
    if (px % 16 != 0)
      throw ConfigError(key(index, "resolution") + ": synthetic needs a multiple of 16 px, got " + std::to_string(px));
    latentSize_ = px / 8;  // the VAE's factor: 1024 px -> 128 latent -> 4096 tokens
    if (cfg.numItems < 1) throw ConfigError(key(index, "num_items") + ": must be at least 1");
    count_ = static_cast<size_t>(cfg.numItems);
  }
  size_t size() const override { return count_; }
  TrainItem item(size_t i) const override {
    // Drawing 512 x 4096 text values costs ~12 ms a step on the CPU (a tenth of a
    // 512 px step on an H200): items are kept once drawn while they fit kCacheBytes.
    std::lock_guard<std::mutex> lock(cacheMutex_);
    if (const auto hit = cache_.find(i); hit != cache_.end()) return hit->second;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(ctx_.seed) * 7919ull + i);
    TrainItem it;
    it.latents = at::randn({ctx_.latentChannels, latentSize_, latentSize_}, gen, at::kFloat);
    it.txt = at::randn({ctx_.textTokens, ctx_.textDim}, gen, at::kFloat);
    it.pooled = at::randn({ctx_.pooledDim}, gen, at::kFloat);
    it.caption = "synthetic " + std::to_string(i);
    const int64_t bytes = (it.latents.numel() + it.txt.numel() + it.pooled.numel()) * 4;
    if (cachedBytes_ + bytes <= kCacheBytes) {
      cachedBytes_ += bytes;
      cache_.emplace(i, it);  // the trainer never writes into an item's tensors
    }
    return it;
  }
  TextEmbedding emptyPrompt() const override {
    return {at::zeros({ctx_.textTokens, ctx_.textDim}), at::zeros({ctx_.pooledDim})};
  }
  std::string describe() const override {
    return "synthetic: " + std::to_string(count_) + " items, latents " + std::to_string(latentSize_) + "x" +
           std::to_string(latentSize_);
  }
  std::string oneItemShape() const override {
    return itemShapeText({ctx_.latentChannels, latentSize_, latentSize_}, emptyPrompt());
  }

 private:
  static constexpr int64_t kCacheBytes = int64_t(256) << 20;
  DatasetContext ctx_;
  int64_t latentSize_ = 64;
  size_t count_ = 64;
  mutable std::mutex cacheMutex_;
  mutable std::map<size_t, TrainItem> cache_;
  mutable int64_t cachedBytes_ = 0;
};

// The tensor names of a latents file (diffusers' too).
const std::vector<std::string> kLatentsNames = {"latents", "latent"};
const std::vector<std::string> kTxtNames = {"txt", "prompt_embeds", "encoder_hidden_states"};
const std::vector<std::string> kPooledNames = {"pooled", "pooled_prompt_embeds", "pooled_projections"};

template <class Map>
auto firstOf(const Map& t, const std::vector<std::string>& names) -> const typename Map::mapped_type* {
  for (const auto& n : names) {
    auto it = t.find(n);
    if (it != t.end()) return &it->second;
  }
  return nullptr;
}

at::Tensor firstOf(const std::map<std::string, at::Tensor>& t, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    auto it = t.find(n);
    if (it != t.end()) return it->second;
  }
  return {};
}

// A latents item's shapes with a leading batch of one dropped ([1, C, H, W] -> [C, H, W]).
struct LatentsItemShapes {
  std::vector<int64_t> latents, txt, pooled;
};

std::vector<int64_t> withoutBatchOfOne(std::vector<int64_t> shape, size_t rank) {
  if (shape.size() == rank + 1 && shape.front() == 1) shape.erase(shape.begin());
  return shape;
}

// Why an item of these shapes cannot be trained, or "" (the item reader and the
// plan's header reader judge alike).
std::string latentsShapeProblem(const LatentsItemShapes& s, const DatasetContext& ctx) {
  const auto& l = s.latents;
  if (l.size() != 3 || l[0] != ctx.latentChannels || l[1] % 2 || l[2] % 2)
    return "'latents' must be [" + std::to_string(ctx.latentChannels) + ", H, W] with even H, W";
  if (s.txt.size() != 2 || s.txt[1] != ctx.textDim) return "'txt' must be [N, " + std::to_string(ctx.textDim) + "]";
  if (s.pooled.size() != 1 || s.pooled[0] != ctx.pooledDim)
    return "'pooled' must be [" + std::to_string(ctx.pooledDim) + "]";
  return "";
}

const char* const kNeedsTensors = "needs tensors 'latents', 'txt' and 'pooled'";

// The files a latents dataset reads: its *.safetensors, sorted, without the empty
// prompt's. `prefix` starts each error ("datasets[0].folder_path: " or "").
std::vector<fs::path> latentsFiles(const fs::path& folder, const std::string& prefix) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    const std::string why = io::pathProblem(folder);
    throw IoError(prefix + folder.string() + ": " + (why.empty() ? "not a folder" : why));
  }
  std::vector<fs::path> files;
  fs::directory_iterator it(folder, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".safetensors" && it->path().filename() != "empty_prompt.safetensors")
      files.push_back(it->path());
  }
  if (ec) throw IoError(prefix + folder.string() + ": cannot be listed: " + ec.message());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw IoError(prefix + "no .safetensors files in " + folder.string());
  return files;
}

class LatentsDataset final : public Dataset {
 public:
  LatentsDataset(const config::DatasetConfig& cfg, const DatasetContext& ctx, size_t index) : ctx_(ctx) {
    folder_ = cfg.folderPath;
    if (folder_.empty()) throw ConfigError(key(index, "folder_path") + ": the latents dataset needs a folder");
    files_ = latentsFiles(folder_, key(index, "folder_path") + ": ");
  }
  size_t size() const override { return files_.size(); }
  TrainItem item(size_t i) const override {
    const auto& path = files_.at(i);
    std::map<std::string, at::Tensor> t;
    std::map<std::string, std::string> meta;
    try {
      auto f = io::SafetensorsFile::open(path);
      for (const auto& n : f.names()) t[n] = f.tensorCopy(n);
      meta = f.metadata();
    } catch (const std::exception& e) {
      throw IoError(path.string() + ": unreadable: " + e.what());
    }
    const at::Tensor* latents = firstOf(t, kLatentsNames);
    const at::Tensor* txt = firstOf(t, kTxtNames);
    const at::Tensor* pooled = firstOf(t, kPooledNames);
    if (!latents || !txt || !pooled) throw IoError(path.string() + ": " + kNeedsTensors);
    TrainItem it;
    const LatentsItemShapes shapes{withoutBatchOfOne(latents->sizes().vec(), 3),
                                   withoutBatchOfOne(txt->sizes().vec(), 2),
                                   withoutBatchOfOne(pooled->sizes().vec(), 1)};
    const std::string problem = latentsShapeProblem(shapes, ctx_);
    if (!problem.empty()) throw IoError(path.string() + ": " + problem);
    it.latents = latents->reshape(shapes.latents);
    it.txt = txt->reshape(shapes.txt);
    it.pooled = pooled->reshape(shapes.pooled);
    it.latents = it.latents.to(at::kFloat);
    it.txt = it.txt.to(at::kFloat);
    it.pooled = it.pooled.to(at::kFloat);
    auto c = meta.find("caption");
    it.caption = c != meta.end() ? c->second : path.stem().string();
    return it;
  }
  TextEmbedding emptyPrompt() const override {
    const auto p = folder_ / "empty_prompt.safetensors";
    std::error_code ec;
    if (fs::exists(p, ec)) {
      auto t = io::loadSafetensors(p);
      auto txt = firstOf(t, {"txt", "prompt_embeds"});
      auto pooled = firstOf(t, {"pooled", "pooled_prompt_embeds"});
      if (txt.defined() && pooled.defined())
        return {txt.reshape({-1, ctx_.textDim}).to(at::kFloat).clone(),
                pooled.reshape({ctx_.pooledDim}).to(at::kFloat).clone()};
    }
    return {at::zeros({ctx_.textTokens, ctx_.textDim}), at::zeros({ctx_.pooledDim})};
  }
  std::string describe() const override {
    return "latents: " + std::to_string(files_.size()) + " files in " + folder_.string();
  }

 private:
  DatasetContext ctx_;
  fs::path folder_;
  std::vector<fs::path> files_;
};

class ConcatDataset final : public Dataset {
 public:
  explicit ConcatDataset(std::vector<std::shared_ptr<Dataset>> parts) : parts_(std::move(parts)) {}
  size_t size() const override {
    size_t n = 0;
    for (const auto& p : parts_) n += p->size();
    return n;
  }
  TrainItem item(size_t i) const override {
    for (const auto& p : parts_) {
      if (i < p->size()) return p->item(i);
      i -= p->size();
    }
    throw Error("dataset index out of range");
  }
  TextEmbedding emptyPrompt() const override { return parts_.front()->emptyPrompt(); }
  std::string describe() const override {
    std::string s;
    for (const auto& p : parts_) s += (s.empty() ? "" : "; ") + p->describe();
    return s;
  }
  std::string oneItemShape() const override {
    const std::string first = parts_.front()->oneItemShape();
    for (const auto& p : parts_)
      if (p->oneItemShape() != first) return "";
    return first;
  }

 private:
  std::vector<std::shared_ptr<Dataset>> parts_;
};

}  // namespace

LatentsFolderShape readLatentsFolderShape(const fs::path& folder, const DatasetContext& ctx) {
  LatentsFolderShape out;
  std::string firstProblem;
  for (const auto& path : latentsFiles(folder, "")) {
    std::string problem;
    try {
      const auto f = io::SafetensorsFile::open(path);  // the header only: no tensor data is read
      const auto& tensors = f.header().tensors;
      const io::TensorInfo* latents = firstOf(tensors, kLatentsNames);
      const io::TensorInfo* txt = firstOf(tensors, kTxtNames);
      const io::TensorInfo* pooled = firstOf(tensors, kPooledNames);
      if (!latents || !txt || !pooled) {
        problem = kNeedsTensors;
      } else {
        const LatentsItemShapes s{withoutBatchOfOne(latents->shape, 3), withoutBatchOfOne(txt->shape, 2),
                                  withoutBatchOfOne(pooled->shape, 1)};
        problem = latentsShapeProblem(s, ctx);
        if (problem.empty()) {
          ++out.files;
          const int64_t image = (s.latents[1] / 2) * (s.latents[2] / 2);  // FLUX packs 2x2 latent patches
          if (image > out.imageTokens) {
            out.imageTokens = image;
            out.latentHeight = s.latents[1];
            out.latentWidth = s.latents[2];
          }
          out.textTokens = std::max(out.textTokens, s.txt[0]);
        }
      }
    } catch (const std::exception& e) {
      problem = std::string("unreadable: ") + e.what();
    }
    if (!problem.empty()) {
      ++out.skipped;
      if (firstProblem.empty()) firstProblem = path.string() + ": " + problem;
    }
  }
  if (out.files == 0)
    throw IoError(folder.string() + ": no usable latents file (" + std::to_string(out.skipped) +
                  " skipped; the first: " + firstProblem + ")");
  return out;
}

std::shared_ptr<Dataset> makeDataset(const config::DatasetConfig& cfg, const DatasetContext& ctx, size_t index) {
  switch (cfg.type) {
    case config::DatasetType::Shapes:
      return std::make_shared<ShapesDataset>(cfg, ctx, index);
    case config::DatasetType::Synthetic:
      return std::make_shared<SyntheticDataset>(cfg, ctx, index);
    case config::DatasetType::Latents:
      return std::make_shared<LatentsDataset>(cfg, ctx, index);
    case config::DatasetType::Images:
      if (!ctx.encoders)
        throw ConfigError(key(index, "type") + ": 'images' needs the model's VAE and text encoders (none were loaded)");
      return std::make_shared<ImageDataset>(cfg, index, *ctx.encoders, ctx.bus);
    case config::DatasetType::Jsonl:
      // Token rows, not latents: the causal-LM family reads them itself.
      throw ConfigError(key(index, "type") + ": 'jsonl' is text for a language model (model.arch: llama); an " +
                        "image model trains on images, latents, synthetic or shapes");
  }
  throw ConfigError(key(index, "type") + ": unknown dataset type");
}

// Reads the hinted next item on a thread of its own, while the card runs the step, so
// a slow read (a cache file not in the page cache, a disk that is busy) is not waited
// for after the step's sync with the card idle; for a run on a GPU the item comes in
// pinned memory (DatasetContext::pinReadAhead), so its copy to the card is queued
// without a copy on the host first. One read at a time: the inner datasets are read by one thread only
// (their caches are not meant for two readers), and an index that was not hinted is read after the pending read is
// done. A failed read ahead throws from item(), as the read would have.
class ReadAheadDataset final : public Dataset {
 public:
  ReadAheadDataset(std::shared_ptr<Dataset> inner, bool pin) : inner_(std::move(inner)), pin_(pin) {}
  ~ReadAheadDataset() override { settle(); }

  size_t size() const override { return inner_->size(); }
  TrainItem item(size_t index) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_.valid()) {
      const size_t pendingIndex = pendingIndex_;
      auto read = std::move(pending_);  // waits here when the read is still running
      if (pendingIndex == index) return read.get();
      read.wait();
    }
    return inner_->item(index);
  }
  void readAhead(size_t index) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_.valid()) {
      if (pendingIndex_ == index) return;
      pending_.wait();
    }
    pendingIndex_ = index;
    pending_ = std::async(std::launch::async, [inner = inner_, index, pin = pin_] {
      TrainItem item = inner->item(index);
      if (pin) pinItem(item);
      return item;
    });
  }
  TextEmbedding emptyPrompt() const override { return inner_->emptyPrompt(); }
  std::string describe() const override { return inner_->describe(); }
  std::string oneItemShape() const override { return inner_->oneItemShape(); }

 private:
  void settle() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_.valid()) pending_.wait();
  }

  // Copies of the item's tensors in page-locked memory (the dataset's own stay as
  // they are: a cached item is shared).
  static void pinItem(TrainItem& item) {
    for (at::Tensor* t : {&item.latents, &item.txt, &item.pooled})
      if (t->defined() && t->device().is_cpu()) *t = t->pin_memory();
  }

  std::shared_ptr<Dataset> inner_;
  bool pin_ = false;
  mutable std::mutex mutex_;
  mutable std::future<TrainItem> pending_;
  mutable size_t pendingIndex_ = 0;
};

std::shared_ptr<Dataset> makeDatasets(const std::vector<config::DatasetConfig>& cfgs, const DatasetContext& ctx) {
  if (cfgs.empty()) throw ConfigError("datasets: at least one dataset is needed");
  std::vector<std::shared_ptr<Dataset>> parts;
  for (size_t i = 0; i < cfgs.size(); ++i) parts.push_back(makeDataset(cfgs[i], ctx, i));
  const bool pin = ctx.pinReadAhead && at::hasCUDA();
  if (parts.size() == 1) return std::make_shared<ReadAheadDataset>(parts.front(), pin);
  return std::make_shared<ReadAheadDataset>(std::make_shared<ConcatDataset>(std::move(parts)), pin);
}

}  // namespace strata::train
