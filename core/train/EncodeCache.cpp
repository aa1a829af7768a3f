#include "train/EncodeCache.h"

#include <sys/mman.h>

#include <chrono>
#include <set>
#include <sstream>

#include "common/Error.h"
#include "common/Interrupted.h"
#include "device/DeviceInventory.h"
#include "events/EventBus.h"
#include "io/ContentHash.h"
#include "io/FileBytes.h"

namespace strata::train {
namespace fs = std::filesystem;

namespace {
constexpr const char* kKeyField = "strata_cache_key";
constexpr const char* kChecksumField = "strata_cache_checksum";

// The CUDA cards of this process (none on a machine without CUDA), listed once.
const std::vector<int>& cudaCards() {
  static const std::vector<int> cards = [] {
    std::vector<int> v;
    for (const auto& d : device::listDevices()) v.push_back(d.index);
    return v;
  }();
  return cards;
}

// A stage starts: the cards' peak figures afresh, so its last event gives the stage's own.
void startStagePeaks() {
  for (const int i : cudaCards()) device::resetPeakMemory(i);
}

// `encoded`: items run through the encoder so far; the rate counts only those.
void progress(const events::EventBus* bus, const std::string& stage, int64_t done, int64_t total, int64_t encoded,
              double t0) {
  if (!bus) return;
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  events::CacheProgressEvent e;
  e.stage = stage;
  e.done = done;
  e.total = total;
  e.encoded = encoded;
  e.itemsPerSecond = now > t0 ? static_cast<double>(encoded) / (now - t0) : 0.0;
  if (done == total && encoded > 0)
    for (const int i : cudaCards()) {
      const int64_t peak = device::memoryFigures(i).peakAllocatedBytes;
      if (peak > 0) e.devicePeakBytes.emplace_back("cuda:" + std::to_string(i), peak);
    }
  bus->publish(e);
}

// Between batches: a requested stop ends the build, the files written so far kept.
void stopPoint(const Encoders& enc, const std::string& stage, int64_t done, int64_t total) {
  if (enc.stopRequested && enc.stopRequested())
    throw Interrupted("caching " + stage + " (" + std::to_string(done) + " of " + std::to_string(total) +
                      " done and kept; the next run reuses them)");
}

double nowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string shapeText(at::IntArrayRef shape) {
  std::ostringstream s;
  s << shape;
  return s.str();
}

// The reason an IoError gives, without the "path: " the reader puts in front.
std::string reasonOf(const std::exception& e, const fs::path& file) {
  std::string why = e.what();
  const std::string prefix = file.string() + ": ";
  if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
  return why;
}

}  // namespace

EncodeCache::EncodeCache(fs::path folder, Encoders encoders, const events::EventBus* bus)
    : folder_(std::move(folder)), enc_(std::move(encoders)), bus_(bus) {
  if (!enc_.image || !enc_.text) throw Error("EncodeCache: an image and a text encoder are needed");
  if (enc_.latentChannels < 1 || enc_.downscaleFactor < 1 || enc_.textDim < 1 || enc_.pooledDim < 0 ||
      enc_.maxSequenceLength < 1)
    throw Error("EncodeCache: the expected latent channels, downscale factor and text widths are needed");
}

void EncodeCache::warn(const std::string& message) const {
  if (bus_) bus_->publish(events::WarningEvent{message, 0});
}

std::string EncodeCache::latentsKey(const ImageEntry& e) const {
  if (e.imageHash.empty()) throw Error("EncodeCache: " + e.image.string() + " has no content hash (not scanned)");
  return std::string(kCacheFormat) + "|latents|" + e.imageHash + "|" + enc_.imageModelId + "|" + e.bucket.name() +
         "|flip=" + (e.flip ? "1" : "0");
}

std::string EncodeCache::textKey(const std::string& caption) const {
  // The caption by two hashes (128 bits), never as text: cache headers are world-readable.
  return std::string(kCacheFormat) + "|text|" + enc_.textModelId + "|len=" + std::to_string(enc_.maxSequenceLength) +
         "|caption=" + io::hashHex(io::xxh64(caption.data(), caption.size(), 0)) +
         io::hashHex(io::xxh64(caption.data(), caption.size(), 1));
}

EncodeCache::Shapes EncodeCache::latentsShapes(const ImageEntry& e) const {
  return {{"latents",
           {enc_.latentChannels, e.bucket.height / enc_.downscaleFactor, e.bucket.width / enc_.downscaleFactor}}};
}

EncodeCache::Shapes EncodeCache::textShapes() const {
  // A model without a pooled vector (pooledDim 0: FLUX.2) stores the tokens alone.
  if (enc_.pooledDim == 0) return {{"txt", {enc_.maxSequenceLength, enc_.textDim}}};
  return {{"txt", {enc_.maxSequenceLength, enc_.textDim}}, {"pooled", {enc_.pooledDim}}};
}

fs::path EncodeCache::latentsFile(const ImageEntry& e) const {
  return folder_ / "latents" / (contentHash(latentsKey(e)) + ".safetensors");
}

fs::path EncodeCache::textFile(const std::string& caption) const {
  return folder_ / "text" / (contentHash(textKey(caption)) + ".safetensors");
}

std::string EncodeCache::checksum(const std::map<std::string, at::Tensor>& tensors) {
  io::Xxh64 h;
  for (const auto& [name, t] : tensors) {
    const at::Tensor c = t.contiguous();
    const std::string dtype = c10::toString(c.scalar_type());
    h.update(name.data(), name.size() + 1);
    h.update(dtype.data(), dtype.size() + 1);
    for (int64_t d : c.sizes()) h.update(&d, sizeof d);
    h.update(c.data_ptr(), c.numel() * c.element_size());
  }
  return io::hashHex(h.digest());
}

std::string EncodeCache::problemOf(const io::SafetensorsFile& f, const std::string& key, const Shapes& shapes) {
  const auto& meta = f.metadata();
  auto k = meta.find(kKeyField);
  if (k == meta.end() || k->second != key) return "written for other inputs or by another cache format";
  const std::vector<std::string> stored = f.names();
  std::set<std::string> names(stored.begin(), stored.end());
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, shape] : shapes) {
    if (!f.contains(name)) return "no tensor '" + name + "'";
    const io::TensorInfo& info = f.info(name);
    if (info.dtype != io::SafetensorsDtype::F32)
      return "tensor '" + name + "' is " + std::string(io::dtypeName(info.dtype)) + ", F32 expected";
    if (info.shape != shape)
      return "tensor '" + name + "' has shape " + shapeText(info.shape) + ", " + shapeText(shape) + " expected";
    tensors[name] = f.tensor(name);
    names.erase(name);
  }
  if (!names.empty()) return "unexpected tensor '" + *names.begin() + "'";
  auto c = meta.find(kChecksumField);
  if (c == meta.end() || c->second != checksum(tensors)) return "checksum mismatch (the file changed on disk)";
  for (const auto& [name, t] : tensors)
    if (!at::isfinite(t).all().item<bool>()) return "tensor '" + name + "' holds NaN or infinite values";
  return "";
}

EncodeCache::Checked EncodeCache::readChecked(const fs::path& file, const std::string& key, const Shapes& shapes) {
  Checked out;
  if (folder_.empty()) {
    auto it = memory_.find(key);
    if (it == memory_.end()) return {{}, "missing"};
    out.tensors = it->second;
    return out;
  }
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(file, ec))) return {{}, "missing"};
  try {
    io::SafetensorsFile f = io::SafetensorsFile::open(file);
    out.problem = problemOf(f, key, shapes);
    if (!out.problem.empty()) return out;
    for (const auto& [name, shape] : shapes) out.tensors[name] = f.tensor(name).clone();
    pin(key, f);
  } catch (const Error& e) {
    out.problem = "unreadable: " + reasonOf(e, file);  // corrupt or truncated: rebuilt by the caller
  }
  return out;
}

void EncodeCache::store(const fs::path& file, const std::string& key,
                        const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::map<std::string, at::Tensor> floats;
  for (const auto& [n, t] : tensors) floats[n] = t.to(at::kCPU, at::kFloat).contiguous();
  if (folder_.empty()) {
    memory_[key] = floats;
    return;
  }
  fs::create_directories(file.parent_path());
  io::writeSafetensors(file, {floats.begin(), floats.end()}, {{kKeyField, key}, {kChecksumField, checksum(floats)}});
  try {
    pin(key, io::SafetensorsFile::open(file));
  } catch (const Error&) {
    pins_.erase(key);  // deleted at once: read back (and rebuilt) when it is needed
  }
}

void EncodeCache::pin(const std::string& key, const io::SafetensorsFile& f) {
  if (!pins_.count(key) && pins_.size() >= kMaxPinnedCacheFiles) return;
  // Read once to be checked: the pin keeps the file alive, not its pages in this process's memory
  // (MADV_DONTNEED keeps them in the page cache; a later read faults them back in from the file).
  // Nothing writes into a cache file's mapping, so no private page is lost.
  if (f.mappedSizeBytes() > 0)
    (void)::madvise(const_cast<std::uint8_t*>(f.mappedBytes()), f.mappedSizeBytes(), MADV_DONTNEED);
  pins_.insert_or_assign(key, f);
}

CacheStats EncodeCache::build(const std::vector<ImageEntry>& entries, int64_t batchSize,
                              const std::vector<std::string>& extraTexts) {
  CacheStats stats;
  // Latents: the distinct (image, bucket, flip) views, grouped by bucket so a batch has one shape.
  std::map<Bucket, std::vector<const ImageEntry*>> todo;
  std::set<std::string> seen;
  int64_t total = 0;
  for (const ImageEntry& e : entries) {
    const std::string key = latentsKey(e);
    if (!seen.insert(key).second) continue;
    ++total;
    const fs::path file = latentsFile(e);
    const Checked c = readChecked(file, key, latentsShapes(e));
    if (c.problem.empty()) {
      ++stats.reused;
      continue;
    }
    if (c.problem != "missing") {
      ++stats.rebuilt;
      warn("rebuilding the cached latents of " + e.image.string() + " (" + file.string() + ": " + c.problem + ")");
    }
    todo[e.bucket].push_back(&e);
  }
  // One reason per image; its other views are left out too.
  std::set<fs::path> skippedImages;
  auto skip = [&](const ImageEntry& e, const std::string& why) {
    if (skippedImages.insert(e.image).second) stats.skipped.push_back({e.image, why});
  };
  startStagePeaks();
  const double t0 = nowSeconds();
  int64_t done = stats.reused;
  progress(bus_, "latents", done, total, 0, t0);
  for (const auto& [bucket, list] : todo) {
    for (size_t i = 0; i < list.size(); i += static_cast<size_t>(batchSize)) {
      stopPoint(enc_, "latents", done, total);
      const size_t n = std::min(list.size() - i, static_cast<size_t>(batchSize));
      std::vector<at::Tensor> pixels;
      std::vector<const ImageEntry*> batchEntries;
      for (size_t j = 0; j < n; ++j) {
        const ImageEntry& e = *list[i + j];
        if (skippedImages.count(e.image)) continue;
        // Read once: the bytes decoded are the bytes hashed, and they must be the ones the scan saw.
        try {
          const std::string bytes = io::readFileBytes(e.image);
          if (contentHash(bytes) != e.imageHash) {
            skip(e, "changed since the folder was scanned (rewritten while the cache was built; the next run uses it)");
            continue;
          }
          pixels.push_back(entryPixelsFromBytes(e, bytes));
          batchEntries.push_back(&e);
        } catch (const Error& err) {
          skip(e, "could no longer be read while the cache was built: " + reasonOf(err, e.image));
        }
      }
      done += static_cast<int64_t>(n);
      if (pixels.empty()) {
        progress(bus_, "latents", done, total, stats.latentsEncoded, t0);
        continue;
      }
      const auto b = static_cast<int64_t>(pixels.size());
      const at::Tensor batch = at::stack(pixels);  // [B, 3, bh, bw]
      const at::Tensor lat = enc_.image(batch);    // [B, C, bh/f, bw/f]
      const std::vector<int64_t> want = {b, enc_.latentChannels, bucket.height / enc_.downscaleFactor,
                                         bucket.width / enc_.downscaleFactor};
      if (!lat.defined() || lat.sizes().vec() != want)
        throw Error("EncodeCache: the image encoder returned " + (lat.defined() ? shapeText(lat.sizes()) : "nothing") +
                    " for a batch of " + bucket.name() + ", " + shapeText(want) + " expected");
      for (int64_t j = 0; j < b; ++j) {
        const ImageEntry& e = *batchEntries[static_cast<size_t>(j)];
        const at::Tensor one = lat[j].to(at::kCPU, at::kFloat).contiguous();
        if (!at::isfinite(one).all().item<bool>()) {
          skip(e, "the image encoder gave NaN or infinite latents for it");
          continue;
        }
        store(latentsFile(e), latentsKey(e), {{"latents", one}});
      }
      stats.latentsEncoded += b;
      progress(bus_, "latents", done, total, stats.latentsEncoded, t0);
    }
  }
  // Text: the distinct captions of the images kept.
  std::vector<std::string> captions;
  for (const ImageEntry& e : entries)
    if (!skippedImages.count(e.image)) captions.push_back(e.caption);
  captions.insert(captions.end(), extraTexts.begin(), extraTexts.end());
  const CacheStats text = buildTexts(captions, "text", batchSize);
  stats.textsEncoded += text.textsEncoded;
  stats.reused += text.reused;
  stats.rebuilt += text.rebuilt;
  return stats;
}

CacheStats EncodeCache::buildTexts(const std::vector<std::string>& texts, const std::string& stage, int64_t batchSize) {
  CacheStats stats;
  std::vector<std::string> captions;
  std::set<std::string> seenCaptions;
  int64_t textTotal = 0;
  const Shapes shapes = textShapes();
  for (const std::string& caption : texts) {
    if (!seenCaptions.insert(caption).second) continue;
    ++textTotal;
    const fs::path file = textFile(caption);
    const Checked c = readChecked(file, textKey(caption), shapes);
    if (c.problem.empty()) {
      ++stats.reused;
      continue;
    }
    if (c.problem != "missing") {
      ++stats.rebuilt;
      warn("rebuilding a cached text embedding (" + file.string() + ": " + c.problem + ")");
    }
    captions.push_back(caption);
  }
  startStagePeaks();
  const double t1 = nowSeconds();
  int64_t textDone = textTotal - static_cast<int64_t>(captions.size());
  progress(bus_, stage, textDone, textTotal, 0, t1);
  for (size_t i = 0; i < captions.size(); i += static_cast<size_t>(batchSize)) {
    stopPoint(enc_, stage, textDone, textTotal);
    const std::vector<std::string> part(
        captions.begin() + static_cast<std::ptrdiff_t>(i),
        captions.begin() + static_cast<std::ptrdiff_t>(std::min(captions.size(), i + batchSize)));
    const std::vector<TextEmbedding> emb = enc_.text(part);
    if (emb.size() != part.size()) throw Error("EncodeCache: the text encoder returned a wrong number of embeddings");
    for (size_t j = 0; j < part.size(); ++j) {
      const at::Tensor txt = emb[j].txt.defined() ? emb[j].txt.to(at::kCPU, at::kFloat) : at::Tensor();
      at::Tensor pooled = emb[j].pooled.defined() ? emb[j].pooled.to(at::kCPU, at::kFloat) : at::Tensor();
      if (enc_.pooledDim == 0 && !pooled.defined()) pooled = at::zeros({0}, at::kFloat);
      const std::vector<int64_t> pooledShape{enc_.pooledDim};
      if (!txt.defined() || !pooled.defined() || txt.sizes().vec() != shapes.at("txt") ||
          pooled.sizes().vec() != pooledShape)
        throw Error("EncodeCache: the text encoder returned txt " + (txt.defined() ? shapeText(txt.sizes()) : "none") +
                    " and pooled " + (pooled.defined() ? shapeText(pooled.sizes()) : "none") + ", " +
                    shapeText(shapes.at("txt")) + " and " + shapeText(pooledShape) + " expected");
      if (!at::isfinite(txt).all().item<bool>() || !at::isfinite(pooled).all().item<bool>())
        throw Error("EncodeCache: the text encoder gave NaN or infinite values (for the caption of cache file " +
                    textFile(part[j]).filename().string() + "); in fp16 T5 overflows: use bf16 or float32");
      if (enc_.pooledDim == 0)
        store(textFile(part[j]), textKey(part[j]), {{"txt", txt}});
      else
        store(textFile(part[j]), textKey(part[j]), {{"txt", txt}, {"pooled", pooled}});
    }
    stats.textsEncoded += static_cast<int64_t>(part.size());
    textDone += static_cast<int64_t>(part.size());
    progress(bus_, stage, textDone, textTotal, stats.textsEncoded, t1);
  }
  return stats;
}

std::map<std::string, at::Tensor> EncodeCache::readOrRebuild(
    const fs::path& file, const std::string& key, const Shapes& shapes,
    const std::function<std::vector<std::pair<std::string, at::Tensor>>()>& encode) {
  Checked c = readChecked(file, key, shapes);
  if (c.problem.empty()) return c.tensors;
  const std::string what = folder_.empty() ? "the cached entry " + key : file.string();
  // The copy mapped when the file was last checked: still readable when the file was deleted.
  auto pin = pins_.find(key);
  if (pin != pins_.end()) {
    if (problemOf(pin->second, key, shapes).empty()) {
      std::vector<std::pair<std::string, at::Tensor>> tensors;
      for (const auto& [name, shape] : shapes) tensors.emplace_back(name, pin->second.tensor(name).clone());
      const io::SafetensorsFile keep = pin->second;  // store() replaces the pin
      store(file, key, tensors);
      warn("cache file " + what + " was " + (c.problem == "missing" ? "deleted" : c.problem) +
           " during the run: written again from the copy in use");
      std::map<std::string, at::Tensor> out(tensors.begin(), tensors.end());
      return out;
    }
    pins_.erase(pin);
  }
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  try {
    tensors = encode();
  } catch (const std::exception& e) {
    throw IoError(what + ": cached entry " + c.problem + ", and it cannot be encoded again during the run (" +
                  e.what() + "); start the run again (or resume it) to rebuild the cache");
  }
  store(file, key, tensors);
  Checked again = readChecked(file, key, shapes);
  if (!again.problem.empty()) throw IoError(what + ": rebuilt, but it does not read back: " + again.problem);
  warn("cache file " + what + " was " + (c.problem == "missing" ? "missing" : c.problem) + ": encoded again");
  return again.tensors;
}

at::Tensor EncodeCache::latents(const ImageEntry& entry) {
  const Shapes shapes = latentsShapes(entry);
  auto t = readOrRebuild(latentsFile(entry), latentsKey(entry), shapes, [&] {
    // loadEntryPixels refuses bytes other than the ones the key names.
    const at::Tensor lat = enc_.image(loadEntryPixels(entry).unsqueeze(0));  // [1, C, h, w]
    if (!lat.defined() || lat.dim() != 4 || lat.size(0) != 1) throw Error("the image encoder returned no [1, C, h, w]");
    return std::vector<std::pair<std::string, at::Tensor>>{{"latents", lat[0].to(at::kCPU, at::kFloat).contiguous()}};
  });
  return t.at("latents");
}

TextEmbedding EncodeCache::text(const std::string& caption) {
  auto t = readOrRebuild(textFile(caption), textKey(caption), textShapes(), [&] {
    const std::vector<TextEmbedding> emb = enc_.text({caption});
    if (emb.size() != 1) throw Error("the text encoder returned a wrong number of embeddings");
    std::vector<std::pair<std::string, at::Tensor>> out{{"txt", emb[0].txt.to(at::kCPU, at::kFloat).contiguous()}};
    if (enc_.pooledDim > 0) out.emplace_back("pooled", emb[0].pooled.to(at::kCPU, at::kFloat));
    return out;
  });
  return {t.at("txt"), enc_.pooledDim > 0 ? t.at("pooled") : at::zeros({0}, at::kFloat)};
}

}  // namespace strata::train
