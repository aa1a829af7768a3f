#include "models/vae/VaeConfig.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <tuple>

#include "common/Error.h"
#include "io/JsonFields.h"
#include "io/JsonFile.h"
#include "common/ShapeText.h"
#include "models/vae/VaeNames.h"

namespace strata::vae {

namespace {

constexpr double kFluxScaling = 0.3611;
constexpr double kFluxShift = 0.1159;
constexpr double kSdScaling = 0.18215;

}  // namespace

void VaeConfig::validate() const {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw ConfigError("VaeConfig: " + what);
  };
  namespace lim = io::limits;
  for (const auto& [key, value, most] :
       {std::tuple<const char*, int64_t, int64_t>{"in_channels", inChannels, lim::kWidth},
        {"out_channels", outChannels, lim::kWidth},
        {"layers_per_block", layersPerBlock, lim::kLayers},
        {"latent_channels", latentChannels, lim::kWidth},
        {"norm_num_groups", normNumGroups, lim::kWidth},
        {"sample_size", sampleSize, lim::kPositions}})
    io::requireAtMost("VaeConfig", key, value, most);
  for (const int64_t c : blockOutChannels) io::requireAtMost("VaeConfig", "a block_out_channels entry", c, lim::kWidth);
  require(inChannels > 0, "in_channels must be positive");
  require(outChannels > 0, "out_channels must be positive");
  require(!blockOutChannels.empty(), "block_out_channels is empty");
  require(numBlocks() <= 16, "block_out_channels has " + std::to_string(numBlocks()) + " levels (at most 16)");
  require(layersPerBlock > 0, "layers_per_block must be positive");
  require(latentChannels > 0, "latent_channels must be positive");
  require(normNumGroups > 0, "norm_num_groups must be positive");
  for (const int64_t c : blockOutChannels) {
    require(c > 0, "block_out_channels " + shapeText(blockOutChannels) + " has a non-positive entry");
    require(c % normNumGroups == 0, "block_out_channels entry " + std::to_string(c) +
                                        " is not divisible by norm_num_groups " + std::to_string(normNumGroups));
  }
  require(std::isfinite(scalingFactor) && scalingFactor > 0, "scaling_factor must be positive");
  require(std::isfinite(shiftFactor), "shift_factor must be finite");
}

VaeConfig VaeConfig::flux1() { return VaeConfig{}; }

VaeConfig VaeConfig::sd1() {
  VaeConfig c;
  c.latentChannels = 4;
  c.sampleSize = 512;
  c.scalingFactor = kSdScaling;
  c.shiftFactor = 0.0;
  c.useQuantConv = true;
  c.usePostQuantConv = true;
  return c;
}

VaeConfig VaeConfig::preset(const std::string& name) {
  if (name == "flux1" || name == "flux" || name == "flux1-dev") return flux1();
  if (name == "sd" || name == "sd1") return sd1();
  throw ConfigError("VaeConfig: unknown preset '" + name + "' (known: flux1, sd)");
}

VaeConfig VaeConfig::fromDiffusersJson(const nlohmann::json& j) {
  if (!j.is_object()) throw ConfigError("VaeConfig: diffusers config is not a JSON object");
  const io::JsonFields fields(j, "VaeConfig: diffusers config");
  if (j.contains("_class_name") && j["_class_name"].is_string() && j["_class_name"] != "AutoencoderKL")
    fields.fail("_class_name", "is " + j["_class_name"].get<std::string>() + ", only AutoencoderKL is supported");

  // diffusers' defaults (SD's VAE), so a config.json that leaves a key out means what it means there.
  VaeConfig c;
  c.blockOutChannels = {64};
  c.layersPerBlock = 1;
  c.latentChannels = 4;
  c.sampleSize = 32;
  c.scalingFactor = kSdScaling;
  c.shiftFactor = 0.0;
  c.useQuantConv = true;
  c.usePostQuantConv = true;
  fields.read("in_channels", c.inChannels);
  fields.read("out_channels", c.outChannels);
  fields.read("block_out_channels", c.blockOutChannels);
  fields.read("layers_per_block", c.layersPerBlock);
  fields.read("latent_channels", c.latentChannels);
  fields.read("norm_num_groups", c.normNumGroups);
  if (auto it = j.find("sample_size"); it != j.end() && it->is_array()) {
    if (it->empty() || !(*it)[0].is_number_integer()) fields.fail("sample_size", "expected an integer or [h, w]");
    // Checked as the file wrote it: 2^64 - 1 read as int64 was -1.
    if (!(*it)[0].is_number_unsigned() || (*it)[0].get<uint64_t>() > static_cast<uint64_t>(io::limits::kPositions))
      fields.fail("sample_size",
                  (*it)[0].dump() + " is out of range (0 to " + std::to_string(io::limits::kPositions) + ")");
    c.sampleSize = (*it)[0].get<int64_t>();
  } else {
    fields.read("sample_size", c.sampleSize);
  }
  fields.read("scaling_factor", c.scalingFactor);
  fields.read("shift_factor", c.shiftFactor);
  fields.read("use_quant_conv", c.useQuantConv);
  fields.read("use_post_quant_conv", c.usePostQuantConv);
  fields.read("mid_block_add_attention", c.midBlockAddAttention);
  fields.read("force_upcast", c.forceUpcast);

  std::string act = "silu";
  fields.read("act_fn", act);
  if (act != "silu") fields.fail("act_fn", "is '" + act + "', only silu is supported");
  for (const auto& [key, type] : {std::pair<const char*, const char*>{"down_block_types", "DownEncoderBlock2D"},
                                  {"up_block_types", "UpDecoderBlock2D"}}) {
    std::vector<std::string> types;
    if (!fields.read(key, types)) continue;
    if (static_cast<int64_t>(types.size()) != c.numBlocks())
      fields.fail(
          key, "has " + std::to_string(types.size()) + " entries, block_out_channels " + std::to_string(c.numBlocks()));
    for (const auto& t : types)
      if (t != type) fields.fail(key, "entry '" + t + "' is not supported (only " + type + ")");
  }
  for (const char* key : {"latents_mean", "latents_std"})
    if (j.contains(key) && !j[key].is_null()) fields.fail(key, "per-channel latent normalisation is not supported");
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("diffusers config: ") + e.what());
  }
  return c;
}

VaeConfig VaeConfig::fromDiffusersJsonFile(const std::filesystem::path& path) {
  const nlohmann::json j = io::readJsonFile(path, io::kMaxSmallFileBytes);  // a config.json: 1 MB at most
  try {
    return fromDiffusersJson(j);
  } catch (const ConfigError& e) {
    throw ConfigError(path.string() + ": " + e.what());
  }
}

nlohmann::json VaeConfig::toDiffusersJson() const {
  nlohmann::json j;
  j["_class_name"] = "AutoencoderKL";
  j["act_fn"] = "silu";
  j["in_channels"] = inChannels;
  j["out_channels"] = outChannels;
  j["block_out_channels"] = blockOutChannels;
  j["down_block_types"] = std::vector<std::string>(blockOutChannels.size(), "DownEncoderBlock2D");
  j["up_block_types"] = std::vector<std::string>(blockOutChannels.size(), "UpDecoderBlock2D");
  j["layers_per_block"] = layersPerBlock;
  j["latent_channels"] = latentChannels;
  j["norm_num_groups"] = normNumGroups;
  j["sample_size"] = sampleSize;
  j["scaling_factor"] = scalingFactor;
  j["shift_factor"] = shiftFactor == 0.0 ? nlohmann::json(nullptr) : nlohmann::json(shiftFactor);
  j["latents_mean"] = nullptr;
  j["latents_std"] = nullptr;
  j["use_quant_conv"] = useQuantConv;
  j["use_post_quant_conv"] = usePostQuantConv;
  j["mid_block_add_attention"] = midBlockAddAttention;
  j["force_upcast"] = forceUpcast;
  return j;
}

bool VaeConfig::operator==(const VaeConfig& o) const {
  return inChannels == o.inChannels && outChannels == o.outChannels && blockOutChannels == o.blockOutChannels &&
         layersPerBlock == o.layersPerBlock && latentChannels == o.latentChannels && normNumGroups == o.normNumGroups &&
         sampleSize == o.sampleSize && scalingFactor == o.scalingFactor && shiftFactor == o.shiftFactor &&
         useQuantConv == o.useQuantConv && usePostQuantConv == o.usePostQuantConv &&
         midBlockAddAttention == o.midBlockAddAttention && forceUpcast == o.forceUpcast;
}

VaeHints VaeHints::of(const VaeConfig& cfg) {
  VaeHints h;
  h.normNumGroups = cfg.normNumGroups;
  h.scalingFactor = cfg.scalingFactor;
  h.shiftFactor = cfg.shiftFactor;
  h.sampleSize = cfg.sampleSize;
  h.forceUpcast = cfg.forceUpcast;
  return h;
}

VaeConfig vaeConfigFromShapes(const std::map<std::string, std::vector<int64_t>>& fileShapes, const VaeHints& hints) {
  std::vector<std::string> fileKeys;
  for (const auto& kv : fileShapes) fileKeys.push_back(kv.first);
  const VaeWeightFormat format = names::detectFormat(fileKeys);
  const auto shapes = names::toDiffusersShapes(fileShapes);
  const int64_t ldmLevels = format == VaeWeightFormat::Ldm ? names::ldmBlockCount(fileKeys) : 0;

  // A needed tensor, named as the file names it.
  auto need = [&](const std::string& key, size_t rank) -> const std::vector<int64_t>& {
    auto it = shapes.find(key);
    const std::string asStored = names::fileKey(key, format, ldmLevels).value_or(key);
    if (it == shapes.end())
      throw LoadError("VAE weights (" + std::string(toString(format)) + " names): no tensor '" + asStored +
                      "', cannot detect the architecture");
    if (it->second.size() != rank)
      throw LoadError("VAE weights: '" + asStored + "' has shape " + shapeText(it->second) + ", expected rank " +
                      std::to_string(rank));
    return it->second;
  };
  auto has = [&](const std::string& key) { return shapes.count(key) > 0; };

  VaeConfig c;
  const auto& convIn = need("encoder.conv_in.weight", 4);  // [C0, in, 3, 3]
  c.inChannels = convIn[1];
  c.blockOutChannels.clear();
  for (int64_t i = 0; has("encoder.down_blocks." + std::to_string(i) + ".resnets.0.conv1.weight"); ++i)
    c.blockOutChannels.push_back(need("encoder.down_blocks." + std::to_string(i) + ".resnets.0.conv1.weight", 4)[0]);
  if (c.blockOutChannels.empty()) need("encoder.down_blocks.0.resnets.0.conv1.weight", 4);
  c.layersPerBlock = 0;
  while (has("encoder.down_blocks.0.resnets." + std::to_string(c.layersPerBlock) + ".conv1.weight")) ++c.layersPerBlock;
  c.latentChannels = need("decoder.conv_in.weight", 4)[1];
  c.outChannels = need("decoder.conv_out.weight", 4)[0];
  c.useQuantConv = has("quant_conv.weight");
  c.usePostQuantConv = has("post_quant_conv.weight");
  c.midBlockAddAttention = has("encoder.mid_block.attentions.0.to_q.weight");

  const bool fluxLike = c.latentChannels == 16;
  c.normNumGroups = hints.normNumGroups.value_or(32);
  c.scalingFactor = hints.scalingFactor.value_or(fluxLike ? kFluxScaling : kSdScaling);
  c.shiftFactor = hints.shiftFactor.value_or(fluxLike ? kFluxShift : 0.0);
  c.sampleSize = hints.sampleSize.value_or(fluxLike ? 1024 : 512);
  c.forceUpcast = hints.forceUpcast.value_or(true);
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw LoadError(std::string("VAE weights: the detected architecture is invalid: ") + e.what());
  }
  return c;
}

std::map<std::string, std::vector<int64_t>> vaeParamShapes(const VaeConfig& cfg) {
  cfg.validate();
  std::map<std::string, std::vector<int64_t>> m;
  auto conv = [&](const std::string& p, int64_t out, int64_t in, int64_t k) {
    m[p + ".weight"] = {out, in, k, k};
    m[p + ".bias"] = {out};
  };
  auto norm = [&](const std::string& p, int64_t c) {
    m[p + ".weight"] = {c};
    m[p + ".bias"] = {c};
  };
  auto linear = [&](const std::string& p, int64_t c) {
    m[p + ".weight"] = {c, c};
    m[p + ".bias"] = {c};
  };
  auto resnet = [&](const std::string& p, int64_t in, int64_t out) {
    norm(p + ".norm1", in);
    conv(p + ".conv1", out, in, 3);
    norm(p + ".norm2", out);
    conv(p + ".conv2", out, out, 3);
    if (in != out) conv(p + ".conv_shortcut", out, in, 1);
  };
  auto mid = [&](const std::string& p, int64_t c) {
    resnet(p + ".resnets.0", c, c);
    if (cfg.midBlockAddAttention) {
      const std::string a = p + ".attentions.0.";
      norm(a + "group_norm", c);
      for (const char* proj : {"to_q", "to_k", "to_v", "to_out.0"}) linear(a + proj, c);
    }
    resnet(p + ".resnets.1", c, c);
  };
  const auto& b = cfg.blockOutChannels;
  const int64_t n = cfg.numBlocks();
  const int64_t top = b.back();

  conv("encoder.conv_in", b[0], cfg.inChannels, 3);
  int64_t out = b[0];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t in = out;
    out = b[i];
    const std::string p = "encoder.down_blocks." + std::to_string(i);
    for (int64_t j = 0; j < cfg.layersPerBlock; ++j) resnet(p + ".resnets." + std::to_string(j), j ? out : in, out);
    if (i + 1 < n) conv(p + ".downsamplers.0.conv", out, out, 3);
  }
  mid("encoder.mid_block", top);
  norm("encoder.conv_norm_out", top);
  conv("encoder.conv_out", 2 * cfg.latentChannels, top, 3);
  if (cfg.useQuantConv) conv("quant_conv", 2 * cfg.latentChannels, 2 * cfg.latentChannels, 1);
  if (cfg.usePostQuantConv) conv("post_quant_conv", cfg.latentChannels, cfg.latentChannels, 1);

  conv("decoder.conv_in", top, cfg.latentChannels, 3);
  mid("decoder.mid_block", top);
  out = top;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t in = out;
    out = b[n - 1 - i];
    const std::string p = "decoder.up_blocks." + std::to_string(i);
    for (int64_t j = 0; j <= cfg.layersPerBlock; ++j) resnet(p + ".resnets." + std::to_string(j), j ? out : in, out);
    if (i + 1 < n) conv(p + ".upsamplers.0.conv", out, out, 3);
  }
  norm("decoder.conv_norm_out", b[0]);
  conv("decoder.conv_out", cfg.outChannels, b[0], 3);
  return m;
}

int64_t vaeParamCount(const VaeConfig& cfg) {
  int64_t total = 0;
  for (const auto& [_, shape] : vaeParamShapes(cfg)) {
    int64_t n = 1;
    for (const int64_t d : shape) n *= d;
    total += n;
  }
  return total;
}

namespace {

// The live activation elements of one forward, walked step by step. `held` is
// what the callers up the stack still hold besides a step's own input.
class VaePeakWalk {
 public:
  explicit VaePeakWalk(int64_t batch) : batch_(static_cast<double>(batch)) {}
  double peak() const { return peak_; }
  double size(int64_t channels, double pixels) const { return batch_ * static_cast<double>(channels) * pixels; }
  void live(double elements) { peak_ = std::max(peak_, elements); }
  // A convolution of `in` elements into `out`, plus its workspace (in + out).
  void conv(double held, double in, double out) { live(held + 2.0 * (in + out)); }

  // VaeResnetBlock::forward: x held throughout; norm1 -> conv1 -> h1; norm2 of h1
  // -> conv2 -> h2 (h1 freed after); the shortcut conv of x; h2 += shortcut.
  void resnet(double held, int64_t cin, int64_t cout, double pixels) {
    const double x = size(cin, pixels), o = size(cout, pixels);
    live(held + 2.0 * x);                   // norm1 (SiLU in place)
    conv(held + x, x, o);                   // conv1 on norm1's output
    live(held + x + 2.0 * o);               // norm2 of h1
    conv(held + x + o, o, o);               // conv2 on norm2's output, h1 still held
    if (cin != cout) conv(held + o, x, o);  // conv_shortcut of x, next to h2
  }

  // VaeLevelImpl::forward: the caller holds the level's input while its resnets
  // run one after another, then the down (pad + stride-2 conv) or up (nearest
  // 2x + conv) resampler. Returns the pixels after it.
  double level(double held, int64_t cin, int64_t cout, int64_t layers, double pixels, int resample) {
    const double input = size(cin, pixels);
    for (int64_t j = 0; j < layers; ++j) resnet(j == 0 ? held : held + input, j == 0 ? cin : cout, cout, pixels);
    const double h = size(cout, pixels);
    if (resample < 0) {
      conv(held + input + h, h, h / 4.0);  // the padded copy is the conv's input
      return pixels / 4.0;
    }
    if (resample > 0) {
      conv(held + input + h, 4.0 * h, 4.0 * h);  // the upsampled copy is the conv's input
      return pixels * 4.0;
    }
    return pixels;
  }

  // VaeMidBlockImpl::forward (its input held throughout): resnet, single-head
  // attention over every pixel (scores in query-row chunks of at most 2^28, the
  // softmax beside them), resnet.
  void mid(double held, int64_t channels, double pixels, bool attention) {
    const double x = size(channels, pixels);
    resnet(held, channels, channels, pixels);
    if (attention) {
      const double chunkRows = std::max(1.0, std::floor(static_cast<double>(int64_t{1} << 28) / (batch_ * pixels)));
      const double scores = batch_ * std::min(chunkRows, pixels) * pixels;
      live(held + 2.0 * x + x + 3.0 * x + 2.0 * scores);  // norm, q, k, v, scores + softmax
      live(held + 2.0 * x + 3.0 * x + 3.0 * x);           // q, k, v, attended, to_out, its reshaped copy
    }
    resnet(held + x, channels, channels, pixels);
  }

 private:
  double batch_;
  double peak_ = 0;
};

int64_t bytesOf(double elements, int64_t elementBytes) {
  return static_cast<int64_t>(std::llround(elements * static_cast<double>(elementBytes)));
}

void checkPeakArgs(const VaeConfig& cfg, int64_t batch, int64_t height, int64_t width, int64_t elementBytes) {
  cfg.validate();
  if (batch < 1 || height < 1 || width < 1 || elementBytes < 1)
    throw ConfigError("VAE peak estimate: batch, size and element bytes must be positive, got batch " +
                      std::to_string(batch) + ", " + std::to_string(width) + "x" + std::to_string(height) + ", " +
                      std::to_string(elementBytes) + " bytes");
}

}  // namespace

int64_t vaeEncodePeakBytes(const VaeConfig& cfg, int64_t batch, int64_t height, int64_t width, int64_t elementBytes) {
  checkPeakArgs(cfg, batch, height, width, elementBytes);
  VaePeakWalk walk(batch);
  const auto& b = cfg.blockOutChannels;
  double pixels = static_cast<double>(height) * static_cast<double>(width);
  const double image = walk.size(cfg.inChannels, pixels);  // held by encode() throughout
  walk.conv(0.0, image, walk.size(b[0], pixels));          // conv_in
  int64_t channels = b[0];
  for (int64_t i = 0; i < cfg.numBlocks(); ++i) {
    pixels = walk.level(image, channels, b[i], cfg.layersPerBlock, pixels, i + 1 < cfg.numBlocks() ? -1 : 0);
    channels = b[i];
  }
  walk.mid(image, channels, pixels, cfg.midBlockAddAttention);
  const double h = walk.size(channels, pixels);
  walk.conv(image + h, h, walk.size(2 * cfg.latentChannels, pixels));  // conv_norm_out, then conv_out
  return bytesOf(walk.peak(), elementBytes);
}

int64_t vaeDecodePeakBytes(const VaeConfig& cfg, int64_t batch, int64_t height, int64_t width, int64_t elementBytes) {
  checkPeakArgs(cfg, batch, height, width, elementBytes);
  VaePeakWalk walk(batch);
  const auto& b = cfg.blockOutChannels;
  const int64_t n = cfg.numBlocks();
  const double f = static_cast<double>(cfg.downscaleFactor());
  double pixels = static_cast<double>(height) * static_cast<double>(width) / (f * f);
  const double latents = walk.size(cfg.latentChannels, pixels);  // held by decode() throughout
  int64_t channels = b[n - 1];
  walk.conv(0.0, latents, walk.size(channels, pixels));  // conv_in
  walk.mid(latents, channels, pixels, cfg.midBlockAddAttention);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t out = b[n - 1 - i];
    pixels = walk.level(latents, channels, out, cfg.layersPerBlock + 1, pixels, i + 1 < n ? 1 : 0);
    channels = out;
  }
  const double h = walk.size(channels, pixels);
  walk.conv(latents + h, h, walk.size(cfg.outChannels, pixels));  // conv_norm_out, then conv_out
  return bytesOf(walk.peak(), elementBytes);
}

}  // namespace strata::vae
