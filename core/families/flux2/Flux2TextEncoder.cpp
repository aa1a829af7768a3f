#include "families/flux2/Flux2TextEncoder.h"

#include <torch/autograd.h>

#include <algorithm>
#include <sstream>

#include "common/Error.h"
#include "io/ContentHash.h"
#include "io/DiffusersFolder.h"
#include "io/JsonFile.h"
#include "models/llama/LlamaCheckpoint.h"
#include "models/llama/LlamaForCausalLM.h"
#include "nn/Block.h"
#include "placement/Placement.h"
#include "placement/QuantScaleAttachment.h"

namespace fs = std::filesystem;

namespace strata::families {

namespace {

// outLayers resolved and checked against the model's layers: hidden_states has
// num_hidden_layers + 1 entries (0 = the embeddings).
std::vector<int64_t> resolveOutLayers(const Flux2TextEncoderOptions& o, Flux2TextEncoderKind kind,
                                      const llama::LlamaConfig& cfg) {
  std::vector<int64_t> layers = o.outLayers.empty() ? flux2DefaultOutLayers(kind) : o.outLayers;
  constexpr size_t kMaxOutLayers = 16;  // the pipelines stack 3
  if (layers.size() > kMaxOutLayers)
    throw ConfigError("text_encoder_out_layers: " + std::to_string(layers.size()) + " layers, at most " +
                      std::to_string(kMaxOutLayers));
  for (const int64_t k : layers)
    if (k < 0 || k > cfg.numHiddenLayers)
      throw ConfigError("text_encoder_out_layers: " + std::to_string(k) + " is not a hidden state of a " +
                        std::to_string(cfg.numHiddenLayers) + "-layer " + cfg.modelType +
                        " (0 = the embeddings .. num_hidden_layers)");
  return layers;
}

std::string settingsOf(Flux2TextEncoderKind kind, const std::vector<int64_t>& layers,
                       const Flux2TextEncoderOptions& o) {
  std::ostringstream s;
  s << "flux2 " << toString(kind) << " text encoder (hidden states";
  for (const int64_t k : layers) s << " " << k;
  s << ", template "
    << (kind == Flux2TextEncoderKind::kQwen3 ? "qwen3 chatml, thinking off" : "mistral3 + system message")
    << ", max_sequence_length " << o.maxSequenceLength << ", " << c10::toString(o.dtype)
    << (o.quantize == nn::QuantType::None ? std::string() : std::string(", ") + nn::quantTypeName(o.quantize)) << ")";
  return s.str();
}

}  // namespace

Flux2TextEncoderFiles Flux2TextEncoderFiles::fromDiffusersFolder(const fs::path& root) {
  Flux2TextEncoderFiles f;
  f.encoder = io::diffusersComponentFolder(root, {"Mistral3ForConditionalGeneration", "Qwen3ForCausalLM"});
  // Both pipelines name their tokenizer component "tokenizer"; its class varies with
  // the transformers version (TokenizersBackend, PreTrainedTokenizerFast, ...).
  f.tokenizer = root / "tokenizer";
  if (!fs::is_directory(f.tokenizer))
    throw IoError(root.string() +
                  ": no tokenizer/ folder (a FLUX.2 diffusers folder holds the text encoder's tokenizer there)");
  return f;
}

Flux2TextEncoderFiles Flux2TextEncoderFiles::fromTransformersFolder(const fs::path& folder) {
  if (!fs::is_regular_file(folder / "config.json"))
    throw IoError((folder / "config.json").string() + ": no such file (a transformers text encoder folder)");
  Flux2TextEncoderFiles f;
  f.encoder = folder;
  f.tokenizer = fs::is_regular_file(folder / "tokenizer.json") ? folder : folder / "tokenizer";
  if (!fs::is_regular_file(f.tokenizer / "tokenizer.json"))
    throw IoError(folder.string() + ": no tokenizer.json, in the folder or in tokenizer/ (FLUX.2 tokenizes with it)");
  return f;
}

Flux2TextEncoderKind flux2TextEncoderKindOf(const fs::path& encoderFolder) {
  const fs::path file = encoderFolder / "config.json";
  if (!fs::is_regular_file(file)) throw IoError(file.string() + ": no such file (the text encoder's config)");
  const auto j = io::readJsonFile(file, io::kMaxSmallFileBytes);
  if (!j.is_object() || !j.contains("model_type") || !j.at("model_type").is_string())
    throw ConfigError(file.string() + ": key 'model_type': missing");
  const auto type = j.at("model_type").get<std::string>();
  if (type == "mistral3") return Flux2TextEncoderKind::kMistral3;
  if (type == "qwen3") return Flux2TextEncoderKind::kQwen3;
  throw ConfigError(file.string() + ": key 'model_type': '" + type +
                    "' is not a FLUX.2 text encoder (mistral3: FLUX.2-dev; qwen3: FLUX.2 [klein])");
}

std::shared_ptr<Flux2PromptEncoder> Flux2PromptEncoder::open(const fs::path& tokenizerFolder, Flux2TextEncoderKind kind,
                                                             const llama::LlamaConfig& cfg,
                                                             const Flux2TextEncoderOptions& options) {
  cfg.validate();
  if (options.maxSequenceLength < 1 || options.maxSequenceLength > cfg.maxPositionEmbeddings)
    throw ConfigError("max_sequence_length: " + std::to_string(options.maxSequenceLength) + " is not in 1.." +
                      std::to_string(cfg.maxPositionEmbeddings) + " (the text encoder's max_position_embeddings)");
  const bool qwen = cfg.modelType == "qwen3";
  if (qwen != (kind == Flux2TextEncoderKind::kQwen3))
    throw ConfigError(std::string("FLUX.2's ") + toString(kind) + " text encoder cannot be a " + cfg.modelType +
                      " model");
  std::shared_ptr<Flux2PromptEncoder> enc(new Flux2PromptEncoder());
  enc->tokenizer_ = Flux2PromptTokenizer::open(tokenizerFolder, kind);
  enc->cfg_ = cfg;
  enc->options_ = options;
  enc->outLayers_ = resolveOutLayers(options, kind, cfg);
  if (enc->tokenizer_.vocabSize() > cfg.vocabSize)
    throw ConfigError(tokenizerFolder.string() + ": the tokenizer has " + std::to_string(enc->tokenizer_.vocabSize()) +
                      " tokens, more than the text encoder's vocab_size " + std::to_string(cfg.vocabSize));
  const auto split = static_cast<int64_t>(options.layerDevices.size());
  if (split > 0 && split != enc->layersRead())
    throw PlacementError("text encoder: the caching plan puts " + std::to_string(split) + " layers on devices, the " +
                         cfg.modelType + " encoder reads " + std::to_string(enc->layersRead()) +
                         " (up to hidden state " + std::to_string(enc->layersRead()) + ")");
  return enc;
}

int64_t Flux2PromptEncoder::layersRead() const {
  return std::max<int64_t>(1, *std::max_element(outLayers_.begin(), outLayers_.end()));
}

void Flux2PromptEncoder::placeLayers() {
  const auto& o = options_;
  if (o.layerDevices.empty()) return;
  placement_ = std::make_shared<placement::Placement>(model_->blockList(), o.layerDevices, o.device, o.headDevice);
  if (o.quantize != nn::QuantType::None) placement_->attachAll(placement::QuantScaleAttachment::forModel(*model_));
  placement_->apply();  // the layers are already there (built on their devices); the final norm moves
  placement_->auditOrThrow("before the text encoder runs");
}

std::shared_ptr<Flux2PromptEncoder> Flux2PromptEncoder::load(const Flux2TextEncoderFiles& files,
                                                             const Flux2TextEncoderOptions& options) {
  const Flux2TextEncoderKind kind = flux2TextEncoderKindOf(files.encoder);
  const auto cfg = llama::LlamaConfig::fromFile(files.encoder);
  auto enc = open(files.tokenizer, kind, cfg, options);
  const auto weights = llama::openLlamaWeights(files.encoder);
  llama::LlamaStreamOptions stream;
  stream.quantize = options.quantize;
  stream.onProgress = options.onProgress;
  llama::LlamaBuildOptions build{options.device, options.dtype};
  // Each layer read (and quantized) on its plan device: no card holds more than its share.
  if (!options.layerDevices.empty())
    build.layerDevice = [devices = options.layerDevices](size_t i) { return devices.at(i); };
  enc->model_ = llama::streamLlamaTextModel(weights, cfg, enc->layersRead(), build, stream);
  for (auto& p : enc->model_->parameters()) p.set_requires_grad(false);
  enc->placeLayers();
  return enc;
}

std::shared_ptr<Flux2PromptEncoder> Flux2PromptEncoder::random(const fs::path& tokenizerFolder,
                                                               Flux2TextEncoderKind kind, const llama::LlamaConfig& cfg,
                                                               const Flux2TextEncoderOptions& options) {
  auto enc = open(tokenizerFolder, kind, cfg, options);
  llama::LlamaBuildOptions build{options.device, options.dtype};
  // Each layer drawn from `device`'s generator (the same weights split or not), quantized,
  // then moved to its plan device before the next one exists.
  if (options.quantize != nn::QuantType::None || !options.layerDevices.empty())
    build.onLayerBuilt = [q = options.quantize, devices = options.layerDevices](size_t i, torch::nn::Module& layer) {
      if (q != nn::QuantType::None) nn::quantizeLinears(layer, q);
      if (!devices.empty()) layer.to(devices.at(i));
    };
  enc->model_ = std::make_shared<llama::LlamaForCausalLM>(llama::llamaTextModelConfig(cfg, enc->layersRead()), build);
  for (auto& p : enc->model_->parameters()) p.set_requires_grad(false);
  enc->placeLayers();
  return enc;
}

Flux2PromptIds Flux2PromptEncoder::tokenize(const std::vector<std::string>& prompts) const {
  return tokenizer_.tokenize(prompts, options_.maxSequenceLength);
}

std::vector<at::Tensor> Flux2PromptEncoder::hiddenStates(const at::Tensor& ids, const at::Tensor& mask,
                                                         nn::BlockRunner* runner) const {
  if (released()) throw Error("prompt encoding: the FLUX.2 text encoder was released");
  at::NoGradGuard noGrad;
  nn::LocalRunner local;
  if (!runner) runner = placement_ ? static_cast<nn::BlockRunner*>(placement_.get()) : &local;
  llama::LlamaInputs in;
  in.inputIds = ids;
  in.attentionMask = mask;  // positions: 0..L-1 per row, padding counted (no position ids, as the pipelines)
  nn::BlockIO io = model_->stem(in);
  const int64_t last = *std::max_element(outLayers_.begin(), outLayers_.end());
  // hidden_states[k] for k = 0..last; only the tapped ones are kept.
  std::vector<at::Tensor> out(outLayers_.size());
  auto keep = [&](int64_t k, const at::Tensor& h) {
    for (size_t i = 0; i < outLayers_.size(); ++i)
      if (outLayers_[i] == k) out[i] = h;
  };
  keep(0, io.img);
  for (int64_t k = 1; k <= last; ++k) {
    io = runner->run(static_cast<size_t>(k - 1), *model_->layer(static_cast<size_t>(k - 1)), io);
    // transformers' last hidden state is the final norm's output; the others are raw.
    if (k == cfg_.numHiddenLayers) {
      const nn::BlockIO head = runner->toHead(io);
      keep(k, model_->norm->forward(head.img));
    } else {
      keep(k, io.img);
    }
  }
  // Split over devices: the tapped states come back to the embeddings' device.
  for (auto& h : out) h = h.to(options_.device);
  return out;
}

at::Tensor Flux2PromptEncoder::stackHiddenStates(const std::vector<at::Tensor>& states) {
  if (states.empty()) throw Error("stackHiddenStates: no hidden states");
  const auto device = states.front().device();
  std::vector<at::Tensor> same;
  for (const auto& s : states) same.push_back(s.to(device));
  const auto stacked = at::stack(same, 1);  // [B, K, L, d]
  const int64_t batch = stacked.size(0), k = stacked.size(1), length = stacked.size(2), d = stacked.size(3);
  return stacked.permute({0, 2, 1, 3}).reshape({batch, length, k * d});  // [B, L, K*d]
}

Flux2PromptEncoding Flux2PromptEncoder::encodeDetailed(const std::vector<std::string>& prompts) const {
  Flux2PromptEncoding e;
  e.prompt = tokenize(prompts);
  e.hiddenStates = hiddenStates(e.prompt.ids, e.prompt.mask);
  e.embeds = stackHiddenStates(e.hiddenStates);
  return e;
}

at::Tensor Flux2PromptEncoder::encode(const std::vector<std::string>& prompts) const {
  return encodeDetailed(prompts).embeds;
}

std::string Flux2PromptEncoder::settingsText() const { return settingsOf(kind(), outLayers_, options_); }

void Flux2PromptEncoder::release() {
  placement_.reset();  // it holds the layers too
  model_.reset();
}

at::Tensor flux2TextIds(int64_t batch, int64_t length) {
  if (batch < 0 || length < 0) throw Error("flux2TextIds: negative size");
  auto ids = at::zeros({batch, length, 4}, at::kLong);
  ids.select(2, 3).copy_(at::arange(length, at::kLong).unsqueeze(0).expand({batch, length}));
  return ids;
}

// ---- the image path's text encoder ----------------------------------------------

Flux2TextEncoder::Flux2TextEncoder(Loader load, std::string identity, int64_t sequenceLength)
    : load_(std::move(load)), identity_(std::move(identity)), sequenceLength_(sequenceLength) {}

Flux2TextEncoder::Flux2TextEncoder(std::shared_ptr<Flux2PromptEncoder> loaded) : encoder_(std::move(loaded)) {
  if (!encoder_) throw Error("Flux2TextEncoder: no text encoder");
  identity_ = encoder_->settingsText();
  sequenceLength_ = encoder_->maxSequenceLength();
}

diffusion::TextEncoding Flux2TextEncoder::encode(const std::vector<std::string>& prompts) {
  if (released_) throw Error("text encoding: the FLUX.2 text encoder was released after caching");
  if (!encoder_) encoder_ = load_();
  diffusion::TextEncoding out;
  out.tokens = encoder_->encode(prompts);  // every position goes to the transformer: no mask
  return out;
}

at::Tensor Flux2TextEncoder::emptyPromptEmbedding() {
  if (!empty_.defined()) empty_ = encode({""}).tokens[0].clone();
  return empty_;
}

void Flux2TextEncoder::release() {
  if (encoder_) encoder_->release();
  encoder_.reset();
  released_ = true;
}

std::string flux2TextEncoderIdentity(const Flux2TextEncoderFiles& files, Flux2TextEncoderKind kind,
                                     const Flux2TextEncoderOptions& options) {
  const auto cfg = llama::LlamaConfig::fromFile(files.encoder);
  return settingsOf(kind, resolveOutLayers(options, kind, cfg), options) + "; encoder " +
         io::weightsStamp(files.encoder) + "; tokenizer " + io::weightsStamp(files.tokenizer);
}

}  // namespace strata::families
