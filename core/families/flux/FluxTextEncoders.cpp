#include "families/flux/FluxTextEncoders.h"

#include <torch/autograd.h>

#include <sstream>

#include "common/Error.h"
#include "io/DiffusersFolder.h"
#include "models/clip/ClipCheckpoint.h"
#include "models/clip/ClipTextModel.h"
#include "models/t5/T5Checkpoint.h"
#include "models/t5/T5Encoder.h"
#include "text/Tokenizer.h"
#include "text/TokenizerFactory.h"

namespace fs = std::filesystem;

namespace strata::families {

TextEncoderFiles TextEncoderFiles::fromDiffusersFolder(const fs::path& root) {
  TextEncoderFiles f;
  f.t5 = io::diffusersComponentFolder(root, {"T5EncoderModel"});
  f.clip = io::diffusersComponentFolder(root, {"CLIPTextModel"});
  f.t5Tokenizer = io::diffusersComponentFolder(root, {"T5Tokenizer", "T5TokenizerFast"});
  f.clipTokenizer = io::diffusersComponentFolder(root, {"CLIPTokenizer", "CLIPTokenizerFast"});
  return f;
}

TextEncoderFiles TextEncoderFiles::fromSingleFiles(const fs::path& t5File, const fs::path& clipFile,
                                                   const fs::path& tokenizerFolder) {
  TextEncoderFiles f;
  f.t5 = t5File;
  f.clip = clipFile;
  // A diffusers root (model_index.json) says which folder is which; a bare folder
  // must use diffusers' names.
  if (io::isDiffusersPipelineFolder(tokenizerFolder)) {
    f.t5Tokenizer = io::diffusersComponentFolder(tokenizerFolder, {"T5Tokenizer", "T5TokenizerFast"});
    f.clipTokenizer = io::diffusersComponentFolder(tokenizerFolder, {"CLIPTokenizer", "CLIPTokenizerFast"});
  } else {
    f.t5Tokenizer = tokenizerFolder / "tokenizer_2";
    f.clipTokenizer = tokenizerFolder / "tokenizer";
    for (const auto& dir : {f.t5Tokenizer, f.clipTokenizer})
      if (!fs::is_directory(dir))
        throw IoError(tokenizerFolder.string() + ": tokenizer folder lacks " + dir.filename().string() +
                      "/ (expected tokenizer/ = CLIP and tokenizer_2/ = T5, as in a diffusers FLUX.1 folder)");
  }
  return f;
}

std::shared_ptr<FluxTextEncoders> FluxTextEncoders::open(const TextEncoderFiles& files,
                                                         const TextEncoderOptions& options, const t5::T5Config& t5Cfg,
                                                         const clip::ClipTextConfig& clipCfg) {
  if (options.maxSequenceLength < 1)
    throw ConfigError("max_sequence_length: must be at least 1, got " + std::to_string(options.maxSequenceLength));
  std::shared_ptr<FluxTextEncoders> enc(new FluxTextEncoders());
  enc->files_ = files;
  enc->options_ = options;

  auto t5Tok = text::openTokenizer(files.t5Tokenizer, text::TokenizerKind::kT5);
  auto clipTok = text::openTokenizer(files.clipTokenizer, text::TokenizerKind::kClip);
  enc->t5Tok_ = std::move(t5Tok.tokenizer);
  enc->clipTok_ = std::move(clipTok.tokenizer);

  enc->t5Cfg_ = t5Cfg;
  enc->clipCfg_ = clipCfg;
  // CLIP's fixed length: the tokenizer's model_max_length (77), never past the positions the model has.
  enc->clipLength_ = enc->clipCfg_.maxPositionEmbeddings;
  if (clipTok.modelMaxLength && *clipTok.modelMaxLength < enc->clipLength_) enc->clipLength_ = *clipTok.modelMaxLength;
  return enc;
}

std::shared_ptr<FluxTextEncoders> FluxTextEncoders::load(const TextEncoderFiles& files,
                                                         const TextEncoderOptions& options) {
  const auto t5Cfg = files.t5Config ? *files.t5Config : t5::T5Checkpoint::open(files.t5).config();
  const auto clipCfg = files.clipConfig ? *files.clipConfig : clip::ClipCheckpoint::open(files.clip).config();
  auto enc = open(files, options, t5Cfg, clipCfg);
  t5::T5StreamOptions t5Stream;
  t5Stream.quantize = options.t5Quantize;
  t5Stream.onProgress = options.onT5Progress;
  enc->t5_ = t5::loadT5Encoder(files.t5, {options.device, options.t5Dtype}, enc->t5Cfg_, t5Stream);
  enc->clip_ = clip::loadClipTextModel(files.clip, {options.device, options.clipDtype}, enc->clipCfg_);
  for (auto& p : enc->t5_->parameters()) p.set_requires_grad(false);
  for (auto& p : enc->clip_->parameters()) p.set_requires_grad(false);
  return enc;
}

std::shared_ptr<FluxTextEncoders> FluxTextEncoders::random(const TextEncoderFiles& tokenizers,
                                                           const t5::T5Config& t5Cfg,
                                                           const clip::ClipTextConfig& clipCfg,
                                                           const TextEncoderOptions& options) {
  t5Cfg.validate();
  clipCfg.validate();
  TextEncoderFiles files = tokenizers;
  files.t5.clear();
  files.clip.clear();
  auto enc = open(files, options, t5Cfg, clipCfg);
  // The ids the tokenizers give must be rows of the embeddings.
  auto fits = [](const text::Tokenizer& tok, int64_t vocab, const fs::path& where, const char* what) {
    if (tok.vocabSize() > vocab)
      throw ConfigError(where.string() + ": the " + what + " tokenizer has " + std::to_string(tok.vocabSize()) +
                        " tokens, more than the random " + what + " model's vocabulary of " + std::to_string(vocab));
  };
  fits(*enc->t5Tok_, t5Cfg.vocabSize, files.t5Tokenizer, "T5");
  fits(*enc->clipTok_, clipCfg.vocabSize, files.clipTokenizer, "CLIP");
  t5::T5BuildOptions t5Build{options.device, options.t5Dtype};
  if (options.t5Quantize != nn::QuantType::None)
    t5Build.onBlockBuilt = [q = options.t5Quantize](torch::nn::Module& block) { nn::quantizeLinears(block, q); };
  enc->t5_ = std::make_shared<t5::T5Encoder>(t5Cfg, t5Build);
  enc->clip_ =
      std::make_shared<clip::ClipTextModel>(clipCfg, clip::ClipBuildOptions{options.device, options.clipDtype});
  for (auto& p : enc->t5_->parameters()) p.set_requires_grad(false);
  for (auto& p : enc->clip_->parameters()) p.set_requires_grad(false);
  return enc;
}

namespace {

// [B, length] int64 ids, padded and truncated as the pipeline does.
at::Tensor fixedIds(const text::Tokenizer& tok, const std::vector<std::string>& prompts, int64_t length,
                    std::vector<int64_t>* dropped) {
  if (prompts.empty()) throw ConfigError("prompt encoding: no prompt given");
  auto ids = at::empty({static_cast<int64_t>(prompts.size()), length}, at::kLong);
  auto acc = ids.accessor<int64_t, 2>();
  for (size_t b = 0; b < prompts.size(); ++b) {
    const auto t = tok.encodeFixed(prompts[b], static_cast<int>(length));
    for (int64_t i = 0; i < length; ++i) acc[static_cast<int64_t>(b)][i] = t.ids.at(static_cast<size_t>(i));
    if (dropped) dropped->push_back(t.droppedTokens);
  }
  return ids;
}

}  // namespace

at::Tensor FluxTextEncoders::t5Ids(const std::vector<std::string>& prompts) const {
  return fixedIds(*t5Tok_, prompts, options_.maxSequenceLength, nullptr);
}

at::Tensor FluxTextEncoders::clipIds(const std::vector<std::string>& prompts) const {
  return fixedIds(*clipTok_, prompts, clipLength_, nullptr);
}

PromptEmbeddings FluxTextEncoders::encode(const std::vector<std::string>& prompts) const {
  if (released()) throw Error("prompt encoding: the text encoders were released");
  PromptEmbeddings e;
  const auto t5In = fixedIds(*t5Tok_, prompts, options_.maxSequenceLength, &e.t5DroppedTokens);  // [B, L]
  const auto clipIn = fixedIds(*clipTok_, prompts, clipLength_, &e.clipDroppedTokens);           // [B, 77]
  at::NoGradGuard noGrad;
  // FluxPipeline passes neither encoder an attention mask.
  e.t5 = t5_->forward(t5In.to(options_.device));                 // [B, L, d_model]
  e.pooled = clip_->forward(clipIn.to(options_.device)).pooled;  // [B, hidden]
  return e;
}

std::string FluxTextEncoders::identity() const {
  std::ostringstream s;
  s << "t5=" << (files_.t5.empty() ? std::string("random") : files_.t5.string()) << " ("
    << c10::toString(options_.t5Dtype) << ", max_sequence_length " << options_.maxSequenceLength
    << "); clip=" << (files_.clip.empty() ? std::string("random") : files_.clip.string()) << " ("
    << c10::toString(options_.clipDtype) << ", length " << clipLength_
    << "); tokenizers=" << files_.t5Tokenizer.string() << ", " << files_.clipTokenizer.string();
  return s.str();
}

void FluxTextEncoders::release() {
  t5_.reset();
  clip_.reset();
}

}  // namespace strata::families
