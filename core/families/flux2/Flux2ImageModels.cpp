#include "families/flux2/Flux2ImageModels.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "common/Error.h"
#include "common/Text.h"
#include "events/EventBus.h"
#include "families/flux2/Flux2Family.h"
#include "families/flux2/Flux2VaeCodec.h"
#include "io/ContentHash.h"
#include "io/DiffusersFolder.h"
#include "models/llama/LlamaCheckpoint.h"
#include "models/llama/LlamaConfig.h"
#include "models/vae/VaeConfig.h"
#include "diffusion/ImagesRun.h"
#include "train/EncodeCache.h"
#include "models/vae/AutoencoderKL.h"
#include "models/vae/VaeCheckpoint.h"
#include "nn/Quantize.h"
#include "placement/Placement.h"

namespace fs = std::filesystem;

namespace strata::families {

const char* const kFlux2TextEncoderModule = "text encoder";

namespace {

// The tapped hidden states laid side by side (Flux2PromptEncoder::stackHiddenStates).
constexpr int64_t kTappedLayers = 3;

bool isFolder(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_directory(path, ec);
}

// The decoder layers a text encoder of `kind` reads: up to its last tapped hidden state
// (flux2DefaultOutLayers), as Flux2PromptEncoder builds it.
int64_t flux2TextLayersRead(Flux2TextEncoderKind kind, const llama::LlamaConfig& lc) {
  const auto tapped = flux2DefaultOutLayers(kind);
  return std::max<int64_t>(1, std::min<int64_t>(lc.numHiddenLayers, *std::max_element(tapped.begin(), tapped.end())));
}

// A tokenizer folder as model.tokenizer_path may give it: tokenizer.json in it, or in its tokenizer/.
fs::path tokenizerFolderOf(const fs::path& folder) {
  return fs::is_regular_file(folder / "tokenizer.json") ? folder : folder / "tokenizer";
}

std::unique_ptr<Flux2VaeCodec> makeVaeCodec(const config::RunConfig& cfg, const Flux2PipelineFiles& files,
                                            int64_t latentChannels, uint64_t seed, const c10::Device& device,
                                            at::ScalarType dtype) {
  const auto& m = cfg.model;
  std::shared_ptr<vae::AutoencoderKL> vae;
  std::string weights;
  if (m.randomWeights) {
    vae::VaeConfig vc = vae::VaeConfig::flux2();
    vc.latentChannels = latentChannels;
    at::manual_seed(seed);
    vae = std::make_shared<vae::AutoencoderKL>(vc, vae::VaeBuildOptions{device, vae::vaeComputeDtype(vc, dtype)});
    std::ostringstream id;
    id << "random flux2 VAE, latent channels " << latentChannels << ", seed " << seed << ", "
       << c10::DeviceTypeName(device.type()) << " (" << c10::toString(vae->dtype()) << ")";
    weights = id.str();
  } else {
    // Hashed before and after the load: the key then names the weights that were loaded.
    const std::string stamp = io::weightsStamp(files.vae);
    vae = vae::loadAutoencoderKL(files.vae, {device, dtype}, files.vaeHints);
    if (io::weightsStamp(files.vae) != stamp)
      throw LoadError(files.vae.string() + ": changed while it was being loaded; start the run again");
    weights = "vae " + stamp + " (" + c10::toString(vae->dtype()) + ")";
  }
  auto codec = std::make_unique<Flux2VaeCodec>(vae, weights);  // refuses a VAE that is not FLUX.2's
  if (codec->latentChannels() != latentChannels)
    throw LoadError((m.randomWeights ? std::string("the random VAE") : files.vae.string()) + ": the VAE gives " +
                    std::to_string(codec->latentChannels()) + " latent channels, the transformer takes " +
                    std::to_string(latentChannels) + " (in_channels / 4)");
  return codec;
}

}  // namespace

Flux2PipelineFiles flux2RunFiles(const config::ModelConfig& m) {
  if (m.nameOrPath.empty()) throw ConfigError("model.name_or_path: no FLUX.2 model given");
  if (isFolder(m.nameOrPath) && fs::is_regular_file(fs::path(m.nameOrPath) / "model_index.json")) {
    if (!isFlux2PipelineFolder(m.nameOrPath))
      throw ConfigError("model.name_or_path: " + m.nameOrPath +
                        "/model_index.json names no FLUX.2 pipeline (Flux2Pipeline or Flux2KleinPipeline)");
    auto f = Flux2PipelineFiles::fromDiffusersFolder(m.nameOrPath);
    f.axesDimsRope = m.axesDimsRope;
    return f;
  }
  // A transformer alone (a BFL file, or a diffusers transformer/ folder): the rest as single files.
  if (m.vaePath.empty())
    throw ConfigError(
        "model.vae_path: a FLUX.2 transformer alone (model.name_or_path) needs the VAE file "
        "(flux2-vae.safetensors) for an images run");
  if (m.textEncoderPath.empty())
    throw ConfigError(
        "model.text_encoder_path: a FLUX.2 transformer alone (model.name_or_path) needs the text "
        "encoder's folder (config.json, weights and tokenizer) for an images run");
  std::error_code ec;
  if (!fs::is_regular_file(m.vaePath, ec)) throw IoError(m.vaePath + ": no such file (model.vae_path)");
  Flux2PipelineFiles f;
  f.transformer = m.nameOrPath;  // the trainer loads it
  f.vae = m.vaePath;
  f.text = Flux2TextEncoderFiles::fromTransformersFolder(m.textEncoderPath);
  f.distilled = m.distilled;
  f.axesDimsRope = m.axesDimsRope;
  return f;
}

bool flux2RunDistilled(const config::ModelConfig& m) {
  if (!m.randomWeights && isFolder(m.nameOrPath) && isFlux2PipelineFolder(m.nameOrPath))
    return io::diffusersPipelineInfo(m.nameOrPath).distilled;
  return m.distilled;
}

Flux2RandomText flux2RandomRunText(const config::ModelConfig& m, bool guidanceEmbeds) {
  Flux2RandomText t;
  t.kind = guidanceEmbeds ? Flux2TextEncoderKind::kMistral3 : Flux2TextEncoderKind::kQwen3;
  fs::path encoder;  // a text encoder config that says the kind
  if (!m.textEncoderPath.empty()) {
    const auto f = Flux2TextEncoderFiles::fromTransformersFolder(m.textEncoderPath);
    encoder = f.encoder;
    t.tokenizer = f.tokenizer;
  } else if (isFolder(m.nameOrPath) && isFlux2PipelineFolder(m.nameOrPath)) {
    const auto f = Flux2TextEncoderFiles::fromDiffusersFolder(m.nameOrPath);
    encoder = f.encoder;
    t.tokenizer = f.tokenizer;
  }
  if (!m.tokenizerPath.empty()) t.tokenizer = tokenizerFolderOf(m.tokenizerPath);
  if (t.tokenizer.empty())
    throw ConfigError(
        "model.tokenizer_path: an images run with random_weights still needs FLUX.2's tokenizer: give a folder with "
        "tokenizer.json (model.tokenizer_path), the text encoder's folder (model.text_encoder_path) or a diffusers "
        "FLUX.2 folder (model.name_or_path)");
  if (!fs::is_regular_file(t.tokenizer / "tokenizer.json"))
    throw IoError((t.tokenizer / "tokenizer.json").string() + ": no such file (model.tokenizer_path)");
  if (!encoder.empty()) t.kind = flux2TextEncoderKindOf(encoder);
  return t;
}

llama::LlamaConfig flux2RandomTextConfig(Flux2TextEncoderKind kind, int64_t jointAttentionDim) {
  if (jointAttentionDim % kTappedLayers != 0)
    throw ConfigError("model.joint_attention_dim: " + std::to_string(jointAttentionDim) +
                      " is not 3 x a text encoder width (FLUX.2 lays three hidden states side by side)");
  llama::LlamaConfig c;
  if (kind == Flux2TextEncoderKind::kMistral3) {
    // Mistral-Small-3.1's language model (FLUX.2-dev).
    c.modelType = "mistral";
    c.vocabSize = 131072;
    c.hiddenSize = 5120;
    c.intermediateSize = 32768;
    c.numHiddenLayers = 40;
    c.rmsNormEps = 1e-5;
    c.ropeTheta = 1e9;
    c.maxPositionEmbeddings = 131072;
  } else {
    // Qwen3-8B (FLUX.2 [klein] 9B; the 4B's Qwen3-4B is 2560 wide).
    c.modelType = "qwen3";
    c.vocabSize = 151936;
    c.hiddenSize = 4096;
    c.intermediateSize = 12288;
    c.numHiddenLayers = 36;
    c.rmsNormEps = 1e-6;
    c.ropeTheta = 1e6;
    c.maxPositionEmbeddings = 40960;
    c.qkNorm = true;
  }
  c.numAttentionHeads = 32;
  c.numKeyValueHeads = 8;
  c.headDim = 128;
  const int64_t width = jointAttentionDim / kTappedLayers;
  if (kind == Flux2TextEncoderKind::kQwen3 && width == 2560) {
    c.intermediateSize = 9728;  // Qwen3-4B (FLUX.2 [klein] 4B)
    c.hiddenSize = width;
    c.tieWordEmbeddings = true;
  } else if (width != c.hiddenSize) {
    c.intermediateSize = std::max<int64_t>(1, c.intermediateSize * width / c.hiddenSize);  // the real model's ratio
    c.hiddenSize = width;
    if (width < 1024) {
      // A test-sized width: 4 heads over it (2 for keys and values), not 32 heads of 128.
      c.numAttentionHeads = 4;
      c.numKeyValueHeads = 2;
      c.headDim = std::max<int64_t>(8, (width / 4) / 2 * 2);  // even: the rotation takes pairs
    }
  }
  return c;
}

std::unique_ptr<diffusion::ImageModels> makeFlux2ImageModels(const config::RunConfig& cfg,
                                                             const train::DatasetContext& ctx,
                                                             const c10::Device& device,
                                                             const placement::CachingPlan* caching) {
  const auto& m = cfg.model;
  const uint64_t seed = static_cast<uint64_t>(cfg.train.seed) + 2;  // the same random models on every run of this seed
  // Float32 on the CPU; on a GPU the text encoder in bf16, the VAE in train.dtype
  // (through vaeComputeDtype: a force_upcast VAE runs fp16 in float32).
  const bool gpu = device.is_cuda();
  const at::ScalarType vaeDtype = !gpu                                     ? at::kFloat
                                  : cfg.train.dtype == config::DType::BF16 ? at::kBFloat16
                                  : cfg.train.dtype == config::DType::FP16 ? at::kHalf
                                                                           : at::kFloat;
  Flux2TextEncoderOptions text;
  text.device = device;
  text.dtype = gpu ? at::kBFloat16 : at::kFloat;
  text.maxSequenceLength = ctx.textTokens;
  if (m.quantizeTe) text.quantize = nn::quantTypeFromName(m.qtype);  // model.quantize_te, with model.qtype
  // The caching plan's split of the text encoder's layers over the run's cards, for the
  // layers the encoder reads (checked against the plan once the encoder knows them).
  auto placeText = [caching](Flux2TextEncoderOptions& o, int64_t layers) {
    if (!caching) return;
    const auto split = placement::cachingLayerDevices(*caching, kFlux2TextEncoderModule, static_cast<size_t>(layers));
    if (!split.split()) return;
    o.device = split.stem;
    o.layerDevices = split.layers;
    o.headDevice = split.head;
  };
  if (ctx.bus)
    text.onProgress = [bus = ctx.bus](int64_t done, int64_t total) {
      bus->publish(events::LoadProgressEvent{events::kLoadFlux2TextEncoder, done, total});
    };

  Flux2PipelineFiles files;
  if (!m.randomWeights) {
    files = flux2RunFiles(m);
    if (m.vaeNormNumGroups) files.vaeHints.normNumGroups = *m.vaeNormNumGroups;
  }
  // The VAE first: with random weights its values come first from the seed.
  auto codec = makeVaeCodec(cfg, files, ctx.latentChannels, seed, device, vaeDtype);

  std::unique_ptr<Flux2TextEncoder> encoder;
  if (m.randomWeights) {
    // The transformer's guidance embedding says dev or [klein] where no text encoder config does.
    const auto rt = flux2RandomRunText(m, planFlux2Config(m).guidanceEmbeds);
    const auto lc = flux2RandomTextConfig(rt.kind, ctx.textDim);
    placeText(text, flux2TextLayersRead(rt.kind, lc));
    const std::string stamp = io::weightsStamp(rt.tokenizer);
    std::ostringstream id;
    id << "random flux2 " << toString(rt.kind) << " text encoder, hidden " << lc.hiddenSize << ", "
       << lc.numHiddenLayers << " layers, seed " << seed + 1 << ", " << c10::DeviceTypeName(device.type())
       << "; max_sequence_length " << text.maxSequenceLength << ", " << c10::toString(text.dtype)
       << (text.quantize == nn::QuantType::None ? std::string() : std::string(", ") + nn::quantTypeName(text.quantize))
       << "; tokenizer " << stamp;
    auto load = [rt, lc, text, seed, stamp]() {
      if (io::weightsStamp(rt.tokenizer) != stamp)
        throw LoadError(rt.tokenizer.string() + ": the tokenizer changed since the run started; start the run again");
      at::manual_seed(seed + 1);
      return Flux2PromptEncoder::random(rt.tokenizer, rt.kind, lc, text);
    };
    encoder = std::make_unique<Flux2TextEncoder>(std::move(load), id.str(), text.maxSequenceLength);
  } else {
    const auto tf = files.text;
    const auto kind = flux2TextEncoderKindOf(tf.encoder);
    placeText(text, flux2TextLayersRead(kind, llama::LlamaConfig::fromFile(tf.encoder)));
    // The key is made now, with the files' hashes as they are when the run starts.
    const std::string identity = flux2TextEncoderIdentity(tf, kind, text);
    const int64_t width = ctx.textDim;
    auto load = [tf, kind, text, identity, width]() {
      // The encoder loads long after the run started (only when something must be encoded):
      // files replaced since then would fill the cache under the old files' key.
      if (flux2TextEncoderIdentity(tf, kind, text) != identity)
        throw LoadError("text encoder " + tf.encoder.string() + " (or its tokenizer " + tf.tokenizer.string() +
                        ") changed since the run started; start the run again");
      auto enc = Flux2PromptEncoder::load(tf, text);
      if (enc->width() != width)
        throw LoadError(tf.encoder.string() + ": the text encoder gives " + std::to_string(enc->width()) +
                        "-wide prompt embeddings (" + std::to_string(enc->outLayers().size()) + " x hidden " +
                        std::to_string(enc->hiddenSize()) + "), the transformer's joint_attention_dim is " +
                        std::to_string(width));
      return enc;
    };
    encoder = std::make_unique<Flux2TextEncoder>(std::move(load), identity, text.maxSequenceLength);
  }
  return std::make_unique<diffusion::ImageModels>(std::move(codec), std::move(encoder));
}

std::vector<placement::OtherModule> flux2OtherModules(const config::RunConfig& cfg, const std::string& device,
                                                      std::string* note) {
  const int64_t px = diffusion::largestImagesResolution(cfg);
  if (px == 0) {
    if (note) *note = "No text encoder or VAE: a synthetic FLUX.2 run trains on random latents and text embeddings.";
    return {};
  }
  const auto& m = cfg.model;
  // The shapes from the config files where they are here, else FLUX.2's (the released VAE, the random encoder's).
  vae::VaeConfig vc = vae::VaeConfig::flux2();
  std::string vaeSource = "FLUX.2's VAE shape";
  fs::path encoder;
  if (!m.randomWeights && isFolder(m.nameOrPath) &&
      fs::is_regular_file(fs::path(m.nameOrPath) / "vae" / "config.json")) {
    vc = vae::VaeConfig::fromDiffusersJsonFile(fs::path(m.nameOrPath) / "vae" / "config.json");
    vaeSource = "vae/config.json";
    if (fs::is_regular_file(fs::path(m.nameOrPath) / "text_encoder" / "config.json"))
      encoder = fs::path(m.nameOrPath) / "text_encoder";
  }
  if (!m.textEncoderPath.empty() && fs::is_regular_file(fs::path(m.textEncoderPath) / "config.json"))
    encoder = m.textEncoderPath;
  const flux2::Flux2Config fc = planFlux2Config(m);  // the transformer's width and guidance embedding
  llama::LlamaConfig lc;
  Flux2TextEncoderKind kind = fc.guidanceEmbeds ? Flux2TextEncoderKind::kMistral3 : Flux2TextEncoderKind::kQwen3;
  std::string textSource;
  if (!encoder.empty()) {
    kind = flux2TextEncoderKindOf(encoder);
    lc = llama::LlamaConfig::fromFile(encoder);
    textSource = (encoder / "config.json").string();
  } else {
    lc = flux2RandomTextConfig(kind, fc.jointAttentionDim);
    textSource = std::string(toString(kind)) + " shape";
  }
  const int64_t layers = flux2TextLayersRead(kind, lc);
  const auto run = llama::llamaTextModelConfig(lc, layers);

  const bool onCpu = device == "cpu";
  const int64_t textBytes = onCpu ? 4 : 2;  // bf16 on a GPU
  int64_t vaeBytes = 4;
  if (!onCpu && cfg.train.dtype != config::DType::FP32)
    vaeBytes = cfg.train.dtype == config::DType::FP16 && vc.forceUpcast ? 4 : 2;
  const int64_t batch = train::kCacheBatchSize;
  const int64_t tokens = Flux2TextEncoderOptions{}.maxSequenceLength;
  const bool sampling = cfg.sample.sampleEvery > 0 && !cfg.sample.prompts.empty();

  std::vector<placement::OtherModule> out(2);
  placement::OtherModule& te = out[0];
  te.name = kFlux2TextEncoderModule;
  te.dtype = onCpu ? "fp32" : "bf16";
  const llama::LlamaParamPlan params = llama::llamaParamPlan(run);
  te.paramCount = params.totalParams();
  // As stem (the embeddings), decoder layers and head (the final norm): a plan may split
  // the layers over the run's cards. model.quantize_te: a layer's Linears in 1 byte plus
  // their float32 scales (a row each, or one a Linear); embeddings and norms in textBytes.
  const auto qtype = m.quantizeTe ? nn::quantTypeFromName(m.qtype) : nn::QuantType::None;
  int64_t largestLinear = 0;
  auto bytesOf = [&](const nn::UnitPlan& u, bool quantized) {
    int64_t bytes = u.paramCount * textBytes;
    if (!quantized) return bytes;
    for (const auto& l : u.linears) {
      const int64_t w = l.inFeatures * l.outFeatures;
      bytes -= w * (textBytes - 1);
      bytes += (nn::perRowScale(qtype) ? l.outFeatures : 1) * 4;
      largestLinear = std::max(largestLinear, w);
    }
    return bytes;
  };
  te.stemBytes = bytesOf(params.stem, false);
  for (const auto& layer : params.blocks) te.layerBytes.push_back(bytesOf(layer, qtype != nn::QuantType::None));
  te.headBytes = bytesOf(params.head, false);
  te.weightBytes = te.stemBytes + te.headBytes;
  for (const int64_t b : te.layerBytes) te.weightBytes += b;
  if (qtype != nn::QuantType::None) te.dtype += " + " + m.qtype + " Linears";
  // One layer's activations for a cache batch: the MLP's two wide tensors, q/k/v/o, the
  // scores; a quantized Linear's weight converted back for as long as its matmul runs.
  te.cachingPeakBytes =
      batch * tokens * (3 * run.intermediateSize + 2 * run.qDim() + 2 * run.kvDim() + 4 * run.hiddenSize) * textBytes +
      batch * run.numAttentionHeads * tokens * tokens * textBytes + largestLinear * textBytes;
  te.freedBeforeTraining = true;
  te.cachingStage = 1;  // after the VAE has encoded the images
  placement::OtherModule& v = out[1];
  v.name = "VAE";
  v.dtype = vaeBytes == 4 ? "fp32" : config::enumName(cfg.train.dtype);
  v.paramCount = vae::vaeParamCount(vc);
  v.weightBytes = v.paramCount * vaeBytes;
  v.cachingPeakBytes = vae::vaeEncodePeakBytes(vc, batch, px, px, vaeBytes);
  v.trainingPeakBytes = sampling ? vae::vaeDecodePeakBytes(vc, 1, cfg.sample.height, cfg.sample.width, vaeBytes) : 0;
  if (note) {
    std::ostringstream os;
    os << "The images dataset needs FLUX.2's text encoder and VAE on " << device
       << " (the text encoder's layers over the run's cards where the caching plan splits them): the " << toString(kind)
       << " text encoder (" << textSource << ", " << layers << " layers read, " << te.dtype << ", "
       << formatBytes(te.weightBytes) << ") encodes the captions and the sample prompts once the VAE (" << vaeSource
       << ", " << v.dtype << ", " << formatBytes(v.weightBytes)
       << ") has encoded the images, and is freed before step 1; the VAE stays for the run";
    if (sampling)
      os << " to decode the samples (" << cfg.sample.width << "x" << cfg.sample.height << ", one at a time)";
    os << ".";
    *note = os.str();
  }
  return out;
}

}  // namespace strata::families
