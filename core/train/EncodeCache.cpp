#include "train/EncodeCache.h"

#include <chrono>
#include <set>

#include "common/Error.h"
#include "events/EventBus.h"
#include "io/FileBytes.h"
#include "io/Safetensors.h"

namespace strata::train {
namespace fs = std::filesystem;

namespace {
constexpr const char* kKeyField = "strata_cache_key";

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
  bus->publish(e);
}

double nowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

EncodeCache::EncodeCache(fs::path folder, Encoders encoders, const events::EventBus* bus)
    : folder_(std::move(folder)), enc_(std::move(encoders)), bus_(bus) {
  if (!enc_.image || !enc_.text) throw Error("EncodeCache: an image and a text encoder are needed");
}

std::string EncodeCache::latentsKey(const ImageEntry& e) const {
  auto it = imageHash_.find(e.image.string());
  if (it == imageHash_.end()) it = imageHash_.emplace(e.image.string(), contentHash(io::readFileBytes(e.image))).first;
  return "latents|" + it->second + "|" + enc_.imageModelId + "|" + e.bucket.name() + "|flip=" + (e.flip ? "1" : "0");
}

std::string EncodeCache::textKey(const std::string& caption) const {
  return "text|" + enc_.textModelId + "|len=" + std::to_string(enc_.maxSequenceLength) + "|" + caption;
}

fs::path EncodeCache::latentsFile(const ImageEntry& e) const {
  return folder_ / "latents" / (contentHash(latentsKey(e)) + ".safetensors");
}

fs::path EncodeCache::textFile(const std::string& caption) const {
  return folder_ / "text" / (contentHash(textKey(caption)) + ".safetensors");
}

std::map<std::string, at::Tensor> EncodeCache::readValid(const fs::path& file, const std::string& key) const {
  if (folder_.empty()) {
    const auto& mem = memory_;
    auto it = mem.find(key);
    return it == mem.end() ? std::map<std::string, at::Tensor>{} : it->second;
  }
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return {};
  try {
    io::SafetensorsFile f = io::SafetensorsFile::open(file);
    const auto& meta = f.metadata();
    auto k = meta.find(kKeyField);
    if (k == meta.end() || k->second != key) return {};  // stale: another input under the same hash
    std::map<std::string, at::Tensor> out;
    for (const auto& name : f.names()) out[name] = f.tensor(name).to(at::kFloat).clone();
    return out;
  } catch (const Error&) {
    return {};  // corrupt or truncated: rebuilt by the caller
  }
}

void EncodeCache::store(const fs::path& file, const std::string& key,
                        const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  if (folder_.empty()) {
    auto& slot = memory_[key];
    for (const auto& [n, t] : tensors) slot[n] = t.to(at::kFloat).contiguous();
    return;
  }
  fs::create_directories(file.parent_path());
  io::writeSafetensors(file, tensors, {{kKeyField, key}});
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
    auto t = readValid(file, key);
    if (t.count("latents") && t.at("latents").dim() == 3) {
      ++stats.reused;
      continue;
    }
    std::error_code ec;
    if (!folder_.empty() && fs::exists(file, ec)) ++stats.rebuilt;
    todo[e.bucket].push_back(&e);
  }
  const double t0 = nowSeconds();
  int64_t done = stats.reused;
  progress(bus_, "latents", done, total, 0, t0);
  for (const auto& [bucket, list] : todo) {
    for (size_t i = 0; i < list.size(); i += static_cast<size_t>(batchSize)) {
      const size_t n = std::min(list.size() - i, static_cast<size_t>(batchSize));
      std::vector<at::Tensor> pixels;
      for (size_t j = 0; j < n; ++j) pixels.push_back(loadEntryPixels(*list[i + j]));
      const at::Tensor batch = at::stack(pixels);  // [B, 3, bh, bw]
      const at::Tensor lat = enc_.image(batch);    // [B, C, bh/8, bw/8]
      if (!lat.defined() || lat.dim() != 4 || lat.size(0) != static_cast<int64_t>(n))
        throw Error("EncodeCache: the image encoder returned a tensor that is not [B, C, h, w]");
      for (size_t j = 0; j < n; ++j)
        store(latentsFile(*list[i + j]), latentsKey(*list[i + j]), {{"latents", lat[j].to(at::kFloat).contiguous()}});
      stats.latentsEncoded += static_cast<int64_t>(n);
      done += static_cast<int64_t>(n);
      progress(bus_, "latents", done, total, stats.latentsEncoded, t0);
    }
  }
  // Text: the distinct captions.
  std::vector<std::string> captions;
  for (const ImageEntry& e : entries) captions.push_back(e.caption);
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
  for (const std::string& caption : texts) {
    if (!seenCaptions.insert(caption).second) continue;
    ++textTotal;
    const fs::path file = textFile(caption);
    auto t = readValid(file, textKey(caption));
    if (t.count("txt") && t.count("pooled") && t.at("txt").dim() == 2 && t.at("pooled").dim() == 1) {
      ++stats.reused;
      continue;
    }
    std::error_code ec;
    if (!folder_.empty() && fs::exists(file, ec)) ++stats.rebuilt;
    captions.push_back(caption);
  }
  const double t1 = nowSeconds();
  int64_t textDone = textTotal - static_cast<int64_t>(captions.size());
  progress(bus_, stage, textDone, textTotal, 0, t1);
  for (size_t i = 0; i < captions.size(); i += static_cast<size_t>(batchSize)) {
    const std::vector<std::string> part(
        captions.begin() + static_cast<std::ptrdiff_t>(i),
        captions.begin() + static_cast<std::ptrdiff_t>(std::min(captions.size(), i + batchSize)));
    const std::vector<TextEmbedding> emb = enc_.text(part);
    if (emb.size() != part.size()) throw Error("EncodeCache: the text encoder returned a wrong number of embeddings");
    for (size_t j = 0; j < part.size(); ++j)
      store(textFile(part[j]), textKey(part[j]),
            {{"txt", emb[j].txt.to(at::kFloat).contiguous()}, {"pooled", emb[j].pooled.to(at::kFloat).contiguous()}});
    stats.textsEncoded += static_cast<int64_t>(part.size());
    textDone += static_cast<int64_t>(part.size());
    progress(bus_, stage, textDone, textTotal, stats.textsEncoded, t1);
  }
  return stats;
}

at::Tensor EncodeCache::latents(const ImageEntry& entry) const {
  auto t = readValid(latentsFile(entry), latentsKey(entry));
  if (!t.count("latents")) throw IoError(latentsFile(entry).string() + ": cached latents missing or invalid");
  return t.at("latents");
}

TextEmbedding EncodeCache::text(const std::string& caption) const {
  auto t = readValid(textFile(caption), textKey(caption));
  if (!t.count("txt") || !t.count("pooled"))
    throw IoError(textFile(caption).string() + ": cached text embedding missing or invalid");
  return {t.at("txt"), t.at("pooled")};
}

}  // namespace strata::train
