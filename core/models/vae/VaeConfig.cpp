#include "models/vae/VaeConfig.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>

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
constexpr int64_t kMaxPatchSide = 16;  // patch_size entries (FLUX.2: 2)

void requireLevels(const std::vector<int64_t>& channels, int64_t groups, const char* key,
                   const std::function<void(bool, const std::string&)>& require) {
  for (const int64_t c : channels) io::requireAtMost("VaeConfig", key, c, io::limits::kWidth);
  for (const int64_t c : channels) {
    require(c > 0, std::string(key) + " " + shapeText(channels) + " has a non-positive entry");
    require(groups <= 0 || c % groups == 0, std::string(key) + " entry " + std::to_string(c) +
                                                " is not divisible by norm_num_groups " + std::to_string(groups));
  }
}

}  // namespace

const char* toString(VaeClass cls) {
  return cls == VaeClass::AutoencoderKLFlux2 ? "AutoencoderKLFlux2" : "AutoencoderKL";
}

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
  require(inChannels > 0, "in_channels must be positive");
  require(outChannels > 0, "out_channels must be positive");
  require(!blockOutChannels.empty(), "block_out_channels is empty");
  require(numBlocks() <= 16, "block_out_channels has " + std::to_string(numBlocks()) + " levels (at most 16)");
  require(layersPerBlock > 0, "layers_per_block must be positive");
  require(latentChannels > 0, "latent_channels must be positive");
  require(normNumGroups > 0, "norm_num_groups must be positive");
  requireLevels(blockOutChannels, normNumGroups, "block_out_channels", require);
  require(std::isfinite(scalingFactor) && scalingFactor > 0, "scaling_factor must be positive");
  require(std::isfinite(shiftFactor), "shift_factor must be finite");
  if (!batchNormLatents()) {
    require(decoderBlockOutChannels.empty(), "decoder_block_out_channels is an AutoencoderKLFlux2 key");
    return;
  }
  if (!decoderBlockOutChannels.empty()) {
    require(decoderBlockOutChannels.size() == blockOutChannels.size(),
            "decoder_block_out_channels " + shapeText(decoderBlockOutChannels) + " has " +
                std::to_string(decoderBlockOutChannels.size()) + " levels, block_out_channels " +
                std::to_string(blockOutChannels.size()));
    requireLevels(decoderBlockOutChannels, normNumGroups, "decoder_block_out_channels", require);
  }
  for (const int64_t p : patchSize) {
    io::requireAtMost("VaeConfig", "patch_size", p, kMaxPatchSide);
    require(p > 0, "patch_size entries must be positive");
  }
  require(std::isfinite(batchNormEps) && batchNormEps > 0, "batch_norm_eps must be positive");
  require(std::isfinite(batchNormMomentum) && batchNormMomentum >= 0 && batchNormMomentum <= 1,
          "batch_norm_momentum must be in [0, 1]");
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

VaeConfig VaeConfig::flux2() {
  VaeConfig c;  // block_out_channels [128, 256, 512, 512], 2 layers, 32 groups, 1024 px: as FLUX.1's
  c.cls = VaeClass::AutoencoderKLFlux2;
  c.latentChannels = 32;
  c.scalingFactor = 1.0;  // no scale/shift: the batch norm normalises
  c.shiftFactor = 0.0;
  c.useQuantConv = true;
  c.usePostQuantConv = true;
  return c;
}

VaeConfig VaeConfig::preset(const std::string& name) {
  if (name == "flux1" || name == "flux" || name == "flux1-dev") return flux1();
  if (name == "sd" || name == "sd1") return sd1();
  if (name == "flux2" || name == "flux2-dev" || name == "flux2-vae") return flux2();
  throw ConfigError("VaeConfig: unknown preset '" + name + "' (known: flux1, sd, flux2)");
}

VaeConfig VaeConfig::fromDiffusersJson(const nlohmann::json& j) {
  if (!j.is_object()) throw ConfigError("VaeConfig: diffusers config is not a JSON object");
  const io::JsonFields fields(j, "VaeConfig: diffusers config");
  VaeClass cls = VaeClass::AutoencoderKL;
  if (j.contains("_class_name") && j["_class_name"].is_string()) {
    const auto name = j["_class_name"].get<std::string>();
    if (name == toString(VaeClass::AutoencoderKLFlux2))
      cls = VaeClass::AutoencoderKLFlux2;
    else if (name != toString(VaeClass::AutoencoderKL))
      fields.fail("_class_name", "is " + name + ", only AutoencoderKL and AutoencoderKLFlux2 are supported");
  }

  // The class's diffusers defaults (AutoencoderKL: SD's VAE; AutoencoderKLFlux2:
  // FLUX.2's), so a config.json that leaves a key out means what it means there.
  VaeConfig c = cls == VaeClass::AutoencoderKLFlux2 ? flux2() : sd1();
  if (cls == VaeClass::AutoencoderKL) {  // diffusers' AutoencoderKL: SD's VAE, one level of 64
    c.blockOutChannels = {64};
    c.layersPerBlock = 1;
    c.sampleSize = 32;
  }
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
  if (cls == VaeClass::AutoencoderKL) {
    fields.read("scaling_factor", c.scalingFactor);
    fields.read("shift_factor", c.shiftFactor);
  } else {
    // AutoencoderKLFlux2 has no scale/shift (diffusers ignores such keys); the batch norm's keys instead.
    if (j.contains("decoder_block_out_channels") && !j["decoder_block_out_channels"].is_null())
      fields.read("decoder_block_out_channels", c.decoderBlockOutChannels);
    std::vector<int64_t> patch;
    if (fields.read("patch_size", patch)) {
      if (patch.size() != 2) fields.fail("patch_size", "expected [rows, cols], got " + shapeText(patch));
      for (const int64_t p : patch)
        if (p < 1 || p > kMaxPatchSide)
          fields.fail("patch_size", shapeText(patch) + " is out of range (1 to " + std::to_string(kMaxPatchSide) + ")");
      c.patchSize = {patch[0], patch[1]};
    }
    fields.read("batch_norm_eps", c.batchNormEps);
    fields.read("batch_norm_momentum", c.batchNormMomentum);
  }
  fields.read("use_quant_conv", c.useQuantConv);
  fields.read("use_post_quant_conv", c.usePostQuantConv);
  fields.read("mid_block_add_attention", c.midBlockAddAttention);
  fields.read("force_upcast", c.forceUpcast);

  std::string act = "silu";
  fields.read("act_fn", act);
  if (act != "silu") fields.fail("act_fn", "is '" + act + "', only silu is supported");
  for (const char* key : {"down_block_types", "up_block_types"})
    if (cls == VaeClass::AutoencoderKLFlux2 && !j.contains(key) && c.numBlocks() != 4)
      fields.fail(key,
                  "absent (diffusers' default has 4 levels), block_out_channels has " + std::to_string(c.numBlocks()));
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
  j["_class_name"] = toString(cls);
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
  if (batchNormLatents()) {
    j["decoder_block_out_channels"] =
        decoderBlockOutChannels.empty() ? nlohmann::json(nullptr) : nlohmann::json(decoderBlockOutChannels);
    j["patch_size"] = std::vector<int64_t>{patchSize[0], patchSize[1]};
    j["batch_norm_eps"] = batchNormEps;
    j["batch_norm_momentum"] = batchNormMomentum;
  } else {
    j["scaling_factor"] = scalingFactor;
    j["shift_factor"] = shiftFactor == 0.0 ? nlohmann::json(nullptr) : nlohmann::json(shiftFactor);
    j["latents_mean"] = nullptr;
    j["latents_std"] = nullptr;
  }
  j["use_quant_conv"] = useQuantConv;
  j["use_post_quant_conv"] = usePostQuantConv;
  j["mid_block_add_attention"] = midBlockAddAttention;
  j["force_upcast"] = forceUpcast;
  return j;
}

bool VaeConfig::operator==(const VaeConfig& o) const {
  return cls == o.cls && decoderBlockOutChannels == o.decoderBlockOutChannels && patchSize == o.patchSize &&
         batchNormEps == o.batchNormEps && batchNormMomentum == o.batchNormMomentum && inChannels == o.inChannels &&
         outChannels == o.outChannels && blockOutChannels == o.blockOutChannels && layersPerBlock == o.layersPerBlock &&
         latentChannels == o.latentChannels && normNumGroups == o.normNumGroups && sampleSize == o.sampleSize &&
         scalingFactor == o.scalingFactor && shiftFactor == o.shiftFactor && useQuantConv == o.useQuantConv &&
         usePostQuantConv == o.usePostQuantConv && midBlockAddAttention == o.midBlockAddAttention &&
         forceUpcast == o.forceUpcast;
}

VaeHints VaeHints::of(const VaeConfig& cfg) {
  VaeHints h;
  h.normNumGroups = cfg.normNumGroups;
  h.scalingFactor = cfg.scalingFactor;
  h.shiftFactor = cfg.shiftFactor;
  h.sampleSize = cfg.sampleSize;
  h.forceUpcast = cfg.forceUpcast;
  if (cfg.batchNormLatents()) {
    h.batchNormEps = cfg.batchNormEps;
    h.batchNormMomentum = cfg.batchNormMomentum;
    h.patchSize = cfg.patchSize;
  }
  return h;
}

VaeConfig vaeConfigFromShapes(const std::map<std::string, std::vector<int64_t>>& fileShapes, const VaeHints& hints) {
  std::vector<std::string> fileKeys;
  for (const auto& kv : fileShapes) fileKeys.push_back(kv.first);
  const VaeWeightFormat format = names::detectFormat(fileKeys);
  const auto shapes = names::toDiffusersShapes(fileShapes);
  const int64_t ldmLevels = isLdm(format) ? names::ldmBlockCount(fileKeys) : 0;

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
  // The decoder's levels, counted from its top (up_blocks.0 is the widest): a
  // FLUX.2 VAE may have a narrower decoder than encoder.
  const int64_t n = c.numBlocks();
  std::vector<int64_t> decoder(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    decoder[static_cast<size_t>(n - 1 - i)] =
        need("decoder.up_blocks." + std::to_string(i) + ".resnets.0.conv1.weight", 4)[0];

  const bool flux2 = has("bn.running_mean");
  const bool fluxLike = c.latentChannels == 16;
  c.normNumGroups = hints.normNumGroups.value_or(32);
  c.scalingFactor = hints.scalingFactor.value_or(fluxLike ? kFluxScaling : kSdScaling);
  c.shiftFactor = hints.shiftFactor.value_or(fluxLike ? kFluxShift : 0.0);
  c.sampleSize = hints.sampleSize.value_or(fluxLike || flux2 ? 1024 : 512);
  c.forceUpcast = hints.forceUpcast.value_or(true);
  if (flux2) {
    c.cls = VaeClass::AutoencoderKLFlux2;
    c.scalingFactor = 1.0;
    c.shiftFactor = 0.0;
    if (decoder != c.blockOutChannels) c.decoderBlockOutChannels = decoder;
    c.batchNormEps = hints.batchNormEps.value_or(c.batchNormEps);
    c.batchNormMomentum = hints.batchNormMomentum.value_or(c.batchNormMomentum);
    const auto& mean = need("bn.running_mean", 1);
    const int64_t per = c.latentChannels > 0 && mean[0] % c.latentChannels == 0 ? mean[0] / c.latentChannels : 0;
    if (hints.patchSize) {
      c.patchSize = *hints.patchSize;
    } else {
      // Shapes give only the patch's area: a square patch (FLUX.2: 2x2 = 4 per latent channel).
      int64_t side = 1;
      while (side * side < per) ++side;
      c.patchSize = {side, side};
    }
    if (per == 0 || c.patchSize[0] * c.patchSize[1] != per)
      throw LoadError("VAE weights: 'bn.running_mean' has shape " + shapeText(mean) + ", not " +
                      std::to_string(c.patchSize[0]) + " x " + std::to_string(c.patchSize[1]) + " x " +
                      std::to_string(c.latentChannels) + " latent channels (a patch_size hint names another patch)");
  } else if (decoder != c.blockOutChannels) {
    throw LoadError("VAE weights: the decoder's levels " + shapeText(decoder) + " differ from the encoder's " +
                    shapeText(c.blockOutChannels) + ", which only a FLUX.2 VAE (with bn.running_mean) may have");
  }
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
  const auto& d = cfg.decoderChannels();
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

  conv("decoder.conv_in", d.back(), cfg.latentChannels, 3);
  mid("decoder.mid_block", d.back());
  out = d.back();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t in = out;
    out = d[n - 1 - i];
    const std::string p = "decoder.up_blocks." + std::to_string(i);
    for (int64_t j = 0; j <= cfg.layersPerBlock; ++j) resnet(p + ".resnets." + std::to_string(j), j ? out : in, out);
    if (i + 1 < n) conv(p + ".upsamplers.0.conv", out, out, 3);
  }
  norm("decoder.conv_norm_out", d[0]);
  conv("decoder.conv_out", cfg.outChannels, d[0], 3);
  return m;
}

std::map<std::string, std::vector<int64_t>> vaeBufferShapes(const VaeConfig& cfg) {
  cfg.validate();
  if (!cfg.batchNormLatents()) return {};
  return {{"bn.running_mean", {cfg.batchNormChannels()}}, {"bn.running_var", {cfg.batchNormChannels()}}};
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
  const auto& b = cfg.decoderChannels();
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
