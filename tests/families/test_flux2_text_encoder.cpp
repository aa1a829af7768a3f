// FLUX.2's prompt side without a fixture: the two chat templates as text, a
// folder whose template is not the kind's, padding on either side, truncation
// after templating on either side, the errors that name the file and key, the
// hidden states (the last index after the final norm), their stacking per token,
// the text ids, and the image path's encoder (no mask, the empty prompt, release).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/autograd.h>

#include <fstream>
#include <set>

#include "common/Error.h"
#include "common/TestSupport.h"
#include "families/flux2/Flux2Prompts.h"
#include "families/flux2/Flux2TextEncoder.h"
#include "models/llama/LlamaForCausalLM.h"

using namespace strata;
using namespace strata::families;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kQwenTemplate =
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}";
constexpr const char* kMistralTemplate =
    "{{- bos_token }}{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{%- for message in messages %}"
    "{{- '[INST]' + message['content'] + '[/INST]' }}{%- endfor %}";

// A character-level tokenizer.json: every printable ASCII character and '\n' one
// token (id = its code), the specials added tokens from 200 on; no merges.
json charTokenizer() {
  json vocab = json::object();
  vocab["\n"] = 10;
  for (int c = 32; c < 127; ++c) vocab[std::string(1, static_cast<char>(c))] = c;
  json added = json::array();
  int id = 200;
  for (const char* t : {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "<pad>", "[SYSTEM_PROMPT]",
                        "[/SYSTEM_PROMPT]", "[INST]", "[/INST]"})
    added.push_back({{"id", id++}, {"content", t}, {"special", true}});
  for (const char* t : {"<think>", "</think>"}) added.push_back({{"id", id++}, {"content", t}, {"special", false}});
  return json{{"version", "1.0"},
              {"added_tokens", added},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
}

void writeText(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// A tokenizer folder of `kind` with tokenizer_config.json = `config`, the kind's template unless `chatTemplate`.
void writeFolder(const fs::path& dir, Flux2TextEncoderKind kind, json config, const char* chatTemplate = nullptr) {
  fs::create_directories(dir);
  writeText(dir / "tokenizer.json", charTokenizer().dump());
  writeText(dir / "tokenizer_config.json", config.dump());
  const char* t =
      chatTemplate ? chatTemplate : (kind == Flux2TextEncoderKind::kQwen3 ? kQwenTemplate : kMistralTemplate);
  if (*t) writeText(dir / "chat_template.jinja", t);
}

json qwenConfig() { return json{{"pad_token", "<|endoftext|>"}, {"eos_token", "<|im_end|>"}}; }
json mistralConfig() { return json{{"pad_token", "<pad>"}, {"bos_token", "<s>"}, {"padding_side", "left"}}; }

std::vector<int64_t> rowOf(const at::Tensor& t, int64_t b) {
  const auto r = t[b].contiguous();
  return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel()};
}

// Ids of `text` in charTokenizer: its characters, the specials as one token each.
std::vector<int64_t> idsOf(const std::string& text) {
  static const std::vector<std::pair<std::string, int64_t>> specials = {
      {"<|endoftext|>", 200}, {"<|im_start|>", 201},    {"<|im_end|>", 202},       {"<s>", 203},
      {"<pad>", 204},         {"[SYSTEM_PROMPT]", 205}, {"[/SYSTEM_PROMPT]", 206}, {"[INST]", 207},
      {"[/INST]", 208},       {"<think>", 209},         {"</think>", 210}};
  std::vector<int64_t> out;
  for (size_t i = 0; i < text.size();) {
    bool matched = false;
    for (const auto& [s, id] : specials)
      if (text.compare(i, s.size(), s) == 0) {
        out.push_back(id);
        i += s.size();
        matched = true;
        break;
      }
    if (!matched) out.push_back(static_cast<unsigned char>(text[i++]));
  }
  return out;
}

llama::LlamaConfig tinyQwen3(int64_t layers) {
  llama::LlamaConfig c = llama::LlamaConfig::tiny();
  c.modelType = "qwen3";
  c.qkNorm = true;
  c.vocabSize = 256;
  c.hiddenSize = 16;
  c.numAttentionHeads = 4;
  c.numKeyValueHeads = 2;
  c.headDim = 8;  // 4 x 8 = 32 > hidden 16, as in Qwen3-4B
  c.numHiddenLayers = layers;
  c.maxPositionEmbeddings = 512;
  return c;
}

}  // namespace

TEST(Flux2Prompts, TheTwoTemplatesAsText) {
  EXPECT_EQ(flux2TemplatedPrompt(Flux2TextEncoderKind::kQwen3, "a cat"),
            "<|im_start|>user\na cat<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(flux2TemplatedPrompt(Flux2TextEncoderKind::kMistral3, "a cat", "<s>"),
            std::string("<s>[SYSTEM_PROMPT]") + kFlux2SystemMessage + "[/SYSTEM_PROMPT][INST]a cat[/INST]");
  EXPECT_NE(std::string(kFlux2SystemMessage).find("object\nattribution"), std::string::npos);
  // Flux2Pipeline drops image placeholders from the prompt; Flux2KleinPipeline keeps the text as it is.
  EXPECT_EQ(flux2TemplatedPrompt(Flux2TextEncoderKind::kMistral3, "[IMG]a [IMG]cat[IMG]", "<s>"),
            flux2TemplatedPrompt(Flux2TextEncoderKind::kMistral3, "a cat", "<s>"));
  EXPECT_NE(flux2TemplatedPrompt(Flux2TextEncoderKind::kQwen3, "[IMG]a").find("[IMG]a"), std::string::npos);
  EXPECT_EQ(flux2DefaultOutLayers(Flux2TextEncoderKind::kMistral3), (std::vector<int64_t>{10, 20, 30}));
  EXPECT_EQ(flux2DefaultOutLayers(Flux2TextEncoderKind::kQwen3), (std::vector<int64_t>{9, 18, 27}));
}

TEST(Flux2Prompts, AChatTemplateThatIsNotTheKindsIsReported) {
  EXPECT_EQ(flux2ChatTemplateMismatch(Flux2TextEncoderKind::kQwen3, kQwenTemplate), "");
  EXPECT_EQ(flux2ChatTemplateMismatch(Flux2TextEncoderKind::kMistral3, kMistralTemplate), "");
  const std::string llama3 = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}";
  EXPECT_NE(flux2ChatTemplateMismatch(Flux2TextEncoderKind::kQwen3, llama3).find("<|im_start|>"), std::string::npos);
  // Qwen2.5's ChatML has no think block: not FLUX.2 [klein]'s template.
  const std::string qwen25 = "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' }}";
  EXPECT_NE(flux2ChatTemplateMismatch(Flux2TextEncoderKind::kQwen3, qwen25).find("<think>"), std::string::npos);
  EXPECT_NE(flux2ChatTemplateMismatch(Flux2TextEncoderKind::kMistral3, kQwenTemplate).find("[SYSTEM_PROMPT]"),
            std::string::npos);

  test::TempDir tmp;
  writeFolder(tmp / "good", Flux2TextEncoderKind::kQwen3, qwenConfig());
  EXPECT_TRUE(Flux2PromptTokenizer::open(tmp / "good", Flux2TextEncoderKind::kQwen3).notes().empty());
  writeFolder(tmp / "wrong", Flux2TextEncoderKind::kQwen3, qwenConfig(), kMistralTemplate);
  const auto wrong = Flux2PromptTokenizer::open(tmp / "wrong", Flux2TextEncoderKind::kQwen3).notes();
  ASSERT_EQ(wrong.size(), 1u);
  EXPECT_NE(wrong[0].find("chat_template.jinja"), std::string::npos) << wrong[0];
  writeFolder(tmp / "none", Flux2TextEncoderKind::kQwen3, qwenConfig(), "");
  const auto none = Flux2PromptTokenizer::open(tmp / "none", Flux2TextEncoderKind::kQwen3).notes();
  ASSERT_EQ(none.size(), 1u);
  EXPECT_NE(none[0].find("no chat template"), std::string::npos) << none[0];
  // tokenizer_config.json's chat_template (a string, or named templates) counts too.
  json named = qwenConfig();
  named["chat_template"] =
      json::array({{{"name", "tool_use"}, {"template", "x"}}, {{"name", "default"}, {"template", kQwenTemplate}}});
  writeFolder(tmp / "named", Flux2TextEncoderKind::kQwen3, named, "");
  EXPECT_TRUE(Flux2PromptTokenizer::open(tmp / "named", Flux2TextEncoderKind::kQwen3).notes().empty());
}

TEST(Flux2Prompts, PaddedOnTheTokenizersSideAndCutAfterTemplating) {
  test::TempDir tmp;
  const std::vector<std::string> prompts = {"a cat", "a red house"};
  writeFolder(tmp / "right", Flux2TextEncoderKind::kQwen3, qwenConfig());
  const auto right = Flux2PromptTokenizer::open(tmp / "right", Flux2TextEncoderKind::kQwen3);
  EXPECT_EQ(right.paddingSide(), PaddingSide::kRight);  // transformers' default
  EXPECT_EQ(right.padId(), 200);
  const auto p = right.tokenize(prompts, 64);
  for (int64_t b = 0; b < 2; ++b) {
    const auto want = idsOf(flux2TemplatedPrompt(Flux2TextEncoderKind::kQwen3, prompts[static_cast<size_t>(b)]));
    const auto n = static_cast<int64_t>(want.size());
    EXPECT_EQ(p.lengths[static_cast<size_t>(b)], n);
    EXPECT_EQ(p.dropped[static_cast<size_t>(b)], 0);
    auto row = rowOf(p.ids, b);
    EXPECT_EQ(std::vector<int64_t>(row.begin(), row.begin() + n), want);
    EXPECT_EQ(std::vector<int64_t>(row.begin() + n, row.end()), std::vector<int64_t>(64 - n, 200));
    EXPECT_EQ(p.mask[b].sum().item<int64_t>(), n);
    EXPECT_EQ(p.mask[b][n - 1].item<int64_t>(), 1);
  }

  // Left padding: the same ids at the end of the row.
  json left = qwenConfig();
  left["padding_side"] = "left";
  writeFolder(tmp / "left", Flux2TextEncoderKind::kQwen3, left);
  const auto l = Flux2PromptTokenizer::open(tmp / "left", Flux2TextEncoderKind::kQwen3).tokenize(prompts, 64);
  for (int64_t b = 0; b < 2; ++b) {
    const int64_t n = p.lengths[static_cast<size_t>(b)];
    EXPECT_TRUE(at::equal(l.ids[b].narrow(0, 64 - n, n), p.ids[b].narrow(0, 0, n)));
    EXPECT_TRUE(at::equal(l.mask[b], p.mask[b].flip(0)));
  }

  // Cut after templating: the template's closing tokens go first (truncation on the right).
  const int64_t n0 = p.lengths[0];
  const auto cut = right.tokenize(prompts, n0 - 5);
  EXPECT_EQ(cut.dropped[0], 5);
  EXPECT_TRUE(at::equal(cut.ids[0], p.ids[0].narrow(0, 0, n0 - 5)));
  EXPECT_EQ(cut.mask.sum().item<int64_t>(), 2 * (n0 - 5));
  // truncation_side left keeps the end.
  json keepEnd = qwenConfig();
  keepEnd["truncation_side"] = "left";
  writeFolder(tmp / "keepEnd", Flux2TextEncoderKind::kQwen3, keepEnd);
  const auto end = Flux2PromptTokenizer::open(tmp / "keepEnd", Flux2TextEncoderKind::kQwen3).tokenize(prompts, n0 - 5);
  EXPECT_TRUE(at::equal(end.ids[0], p.ids[0].narrow(0, 5, n0 - 5)));

  // Mistral-3: bos + system prompt, no special tokens added by the tokenizer, padded left.
  writeFolder(tmp / "mistral", Flux2TextEncoderKind::kMistral3, mistralConfig());
  const auto m = Flux2PromptTokenizer::open(tmp / "mistral", Flux2TextEncoderKind::kMistral3);
  const auto mp = m.tokenize({"a cat"}, 300);
  const auto want = idsOf(flux2TemplatedPrompt(Flux2TextEncoderKind::kMistral3, "a cat"));
  ASSERT_EQ(mp.lengths[0], static_cast<int64_t>(want.size()));
  EXPECT_EQ(want.front(), 203);  // <s>
  const auto row = rowOf(mp.ids, 0);
  EXPECT_EQ(std::vector<int64_t>(row.end() - static_cast<int64_t>(want.size()), row.end()), want);
  EXPECT_EQ(row.front(), 204);  // <pad>

  EXPECT_THROW(right.tokenize({}, 64), ConfigError);
  EXPECT_THROW(right.tokenize(prompts, 0), ConfigError);
}

TEST(Flux2Prompts, Qwen3RunsThePostProcessorAndTruncationKeepsItsTokens) {
  // A post-processor that appends <|endoftext|>: tokenizer(text) adds it (Flux2KleinPipeline),
  // apply_chat_template's tokenization (Flux2Pipeline) does not.
  json tok = charTokenizer();
  tok["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}}})},
      {"pair",
       json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
      {"special_tokens",
       {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {200}}, {"tokens", {"<|endoftext|>"}}}}}}};
  test::TempDir tmp;
  for (const char* name : {"qwen", "mistral"}) {
    const bool qwen = std::string(name) == "qwen";
    const auto kind = qwen ? Flux2TextEncoderKind::kQwen3 : Flux2TextEncoderKind::kMistral3;
    writeFolder(tmp / name, kind, qwen ? qwenConfig() : mistralConfig());
    writeText(tmp / name / "tokenizer.json", tok.dump());
  }
  const auto qwen = Flux2PromptTokenizer::open(tmp / "qwen", Flux2TextEncoderKind::kQwen3);
  const auto body = idsOf(flux2TemplatedPrompt(Flux2TextEncoderKind::kQwen3, "a cat"));
  const auto n = static_cast<int64_t>(body.size());
  const auto whole = qwen.tokenize({"a cat"}, 64);
  EXPECT_EQ(whole.lengths[0], n);
  auto row = rowOf(whole.ids, 0);
  EXPECT_EQ(std::vector<int64_t>(row.begin(), row.begin() + n), body);
  EXPECT_EQ(row[static_cast<size_t>(n)], 200);  // the post-processor's token
  EXPECT_EQ(whole.mask.sum().item<int64_t>(), n + 1);
  // Cut: room is kept for the post-processor's token, as transformers' truncation does.
  const auto cut = qwen.tokenize({"a cat"}, n - 5);
  EXPECT_EQ(cut.dropped[0], 6);
  row = rowOf(cut.ids, 0);
  EXPECT_EQ(std::vector<int64_t>(row.begin(), row.end() - 1), std::vector<int64_t>(body.begin(), body.begin() + n - 6));
  EXPECT_EQ(row.back(), 200);

  const auto mistral = Flux2PromptTokenizer::open(tmp / "mistral", Flux2TextEncoderKind::kMistral3);
  const auto m = mistral.tokenize({"a cat"}, 300);
  const auto want = idsOf(flux2TemplatedPrompt(Flux2TextEncoderKind::kMistral3, "a cat"));
  EXPECT_EQ(m.mask.sum().item<int64_t>(), static_cast<int64_t>(want.size()));  // nothing added
}

TEST(Flux2Prompts, FolderErrorsNameTheFileAndKey) {
  test::TempDir tmp;
  json noPad = qwenConfig();
  noPad.erase("pad_token");
  writeFolder(tmp / "nopad", Flux2TextEncoderKind::kQwen3, noPad);
  try {
    Flux2PromptTokenizer::open(tmp / "nopad", Flux2TextEncoderKind::kQwen3);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: pad_token"), std::string::npos) << e.what();
  }
  json side = qwenConfig();
  side["padding_side"] = "middle";
  writeFolder(tmp / "side", Flux2TextEncoderKind::kQwen3, side);
  try {
    Flux2PromptTokenizer::open(tmp / "side", Flux2TextEncoderKind::kQwen3);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: padding_side"), std::string::npos) << e.what();
  }
  json bos = mistralConfig();
  bos["bos_token"] = "<bos>";
  writeFolder(tmp / "bos", Flux2TextEncoderKind::kMistral3, bos);
  EXPECT_THROW(Flux2PromptTokenizer::open(tmp / "bos", Flux2TextEncoderKind::kMistral3), IoError);
  EXPECT_THROW(Flux2PromptTokenizer::open(tmp / "absent", Flux2TextEncoderKind::kQwen3), IoError);
}

TEST(Flux2TextEncoder, TextIdsCountTheTokens) {
  const auto ids = flux2TextIds(2, 5);
  ASSERT_EQ(ids.sizes(), (std::vector<int64_t>{2, 5, 4}));
  EXPECT_EQ(ids.scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(ids.narrow(2, 0, 3), at::zeros({2, 5, 3}, at::kLong)));
  EXPECT_TRUE(at::equal(ids.select(2, 3)[1], at::arange(5, at::kLong)));
}

TEST(Flux2TextEncoder, HiddenStatesStackPerTokenLayerByLayer) {
  // K states [B, L, d]: state i filled with i + 1.
  std::vector<at::Tensor> states;
  for (int i = 0; i < 3; ++i) states.push_back(at::full({2, 4, 5}, i + 1.0));
  const auto e = Flux2PromptEncoder::stackHiddenStates(states);  // [B, L, 3d]
  ASSERT_EQ(e.sizes(), (std::vector<int64_t>{2, 4, 15}));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(at::equal(e.narrow(2, 5 * i, 5), states[static_cast<size_t>(i)])) << i;
}

TEST(Flux2TextEncoder, HiddenStatesAreTransformersIndices) {
  test::TempDir tmp;
  writeFolder(tmp / "tok", Flux2TextEncoderKind::kQwen3, qwenConfig());
  Flux2TextEncoderOptions o;
  o.maxSequenceLength = 48;
  o.outLayers = {0, 2, 3};  // the embeddings, a raw layer output, the last one (after the final norm)
  torch::manual_seed(7);
  const auto enc = Flux2PromptEncoder::random(tmp / "tok", Flux2TextEncoderKind::kQwen3, tinyQwen3(3), o);
  EXPECT_EQ(enc->width(), 48);
  auto& model = *enc->model();
  {
    at::NoGradGuard g;
    model.norm->weight.uniform_(0.5, 1.5);  // a norm that is not the identity
  }
  const auto detailed = enc->encodeDetailed({"a cat", "a red house"});
  ASSERT_EQ(detailed.embeds.sizes(), (std::vector<int64_t>{2, 48, 48}));

  at::NoGradGuard g;
  llama::LlamaInputs in;
  in.inputIds = detailed.prompt.ids;
  in.attentionMask = detailed.prompt.mask;
  nn::BlockIO io = model.stem(in);
  EXPECT_TRUE(at::equal(detailed.hiddenStates[0], io.img));
  for (size_t i = 0; i < 2; ++i) io = model.layer(i)->forward(io);
  EXPECT_TRUE(at::equal(detailed.hiddenStates[1], io.img));
  io = model.layer(2)->forward(io);
  EXPECT_TRUE(at::equal(detailed.hiddenStates[2], model.norm->forward(io.img)));
  EXPECT_FALSE(at::allclose(detailed.hiddenStates[2], io.img));

  // Only as many layers as the highest tapped one are built.
  o.outLayers = {1, 2};
  EXPECT_EQ(
      Flux2PromptEncoder::random(tmp / "tok", Flux2TextEncoderKind::kQwen3, tinyQwen3(3), o)->model()->layerCount(),
      2u);
  o.outLayers = {4};
  EXPECT_THROW(Flux2PromptEncoder::random(tmp / "tok", Flux2TextEncoderKind::kQwen3, tinyQwen3(3), o), ConfigError);
  o.outLayers = {};
  o.maxSequenceLength = 1024;  // past max_position_embeddings
  EXPECT_THROW(Flux2PromptEncoder::random(tmp / "tok", Flux2TextEncoderKind::kQwen3, tinyQwen3(3), o), ConfigError);
  // A tokenizer with more tokens than the model's vocabulary.
  auto small = tinyQwen3(3);
  small.vocabSize = 100;
  o.maxSequenceLength = 48;
  o.outLayers = {1};
  EXPECT_THROW(Flux2PromptEncoder::random(tmp / "tok", Flux2TextEncoderKind::kQwen3, small, o), ConfigError);
  // A Mistral-3 kind on a Qwen3 model.
  writeFolder(tmp / "mtok", Flux2TextEncoderKind::kMistral3, mistralConfig());
  EXPECT_THROW(Flux2PromptEncoder::random(tmp / "mtok", Flux2TextEncoderKind::kMistral3, tinyQwen3(3), o), ConfigError);
}

TEST(Flux2TextEncoder, TheImagePathsEncoderGivesEveryPositionAndTheEmptyPrompt) {
  test::TempDir tmp;
  writeFolder(tmp / "tok", Flux2TextEncoderKind::kQwen3, qwenConfig());
  Flux2TextEncoderOptions o;
  o.maxSequenceLength = 40;
  o.outLayers = {1, 2, 3};
  torch::manual_seed(8);
  auto enc = Flux2PromptEncoder::random(tmp / "tok", Flux2TextEncoderKind::kQwen3, tinyQwen3(3), o);
  int loads = 0;
  Flux2TextEncoder te(
      [&] {
        ++loads;
        return enc;
      },
      "id", 40);
  EXPECT_FALSE(te.loaded());
  const auto e = te.encode({"a cat", ""});
  EXPECT_EQ(loads, 1);
  EXPECT_FALSE(e.mask.defined());
  EXPECT_FALSE(e.pooled.defined());
  ASSERT_EQ(e.tokens.sizes(), (std::vector<int64_t>{2, 40, 48}));
  EXPECT_TRUE(at::equal(e.tokens, enc->encode({"a cat", ""})));
  const auto empty = te.emptyPromptEmbedding();
  EXPECT_TRUE(at::equal(empty, e.tokens[1]));
  te.release();
  EXPECT_THROW(te.encode({"a cat"}), Error);
  EXPECT_TRUE(at::equal(te.emptyPromptEmbedding(), empty));  // kept for caption dropout
  EXPECT_TRUE(enc->released());
  EXPECT_THROW(enc->encode({"a"}), Error);
}

TEST(Flux2TextEncoder, IdentityNamesTheFilesContentAndEverySettingThatChangesTheEmbeddings) {
  test::TempDir tmp;
  writeFolder(tmp / "tokenizer", Flux2TextEncoderKind::kQwen3, qwenConfig());
  fs::create_directories(tmp / "text_encoder");
  json cfg = tinyQwen3(30).toJson();
  writeText(tmp / "text_encoder" / "config.json", cfg.dump());
  writeText(tmp / "text_encoder" / "model.safetensors", "weights v1");
  const Flux2TextEncoderFiles files{tmp / "text_encoder", tmp / "tokenizer"};
  // A transformers folder: the tokenizer beside the weights, else in tokenizer/.
  EXPECT_THROW(Flux2TextEncoderFiles::fromTransformersFolder(tmp / "text_encoder"), IoError);
  fs::create_directories(tmp / "text_encoder" / "tokenizer");
  fs::copy_file(tmp / "tokenizer" / "tokenizer.json", tmp / "text_encoder" / "tokenizer" / "tokenizer.json");
  EXPECT_EQ(Flux2TextEncoderFiles::fromTransformersFolder(tmp / "text_encoder").tokenizer,
            tmp / "text_encoder" / "tokenizer");
  fs::remove_all(tmp / "text_encoder" / "tokenizer");
  EXPECT_THROW(Flux2TextEncoderFiles::fromTransformersFolder(tmp / "tokenizer"), IoError);  // no config.json
  EXPECT_EQ(flux2TextEncoderKindOf(files.encoder), Flux2TextEncoderKind::kQwen3);
  Flux2TextEncoderOptions o;
  const std::string base = flux2TextEncoderIdentity(files, Flux2TextEncoderKind::kQwen3, o);
  EXPECT_NE(base.find("9 18 27"), std::string::npos) << base;  // klein's default layers
  EXPECT_EQ(flux2TextEncoderIdentity(files, Flux2TextEncoderKind::kQwen3, o), base);
  std::set<std::string> seen{base};
  auto differs = [&](const Flux2TextEncoderOptions& other, const char* what) {
    const std::string id = flux2TextEncoderIdentity(files, Flux2TextEncoderKind::kQwen3, other);
    EXPECT_TRUE(seen.insert(id).second) << what << ": " << id;
  };
  Flux2TextEncoderOptions layers = o;
  layers.outLayers = {9, 18, 26};
  differs(layers, "out layers");
  Flux2TextEncoderOptions length = o;
  length.maxSequenceLength = 256;
  differs(length, "max length");
  Flux2TextEncoderOptions dtype = o;
  dtype.dtype = at::kBFloat16;
  differs(dtype, "dtype");
  Flux2TextEncoderOptions quant = o;
  quant.quantize = nn::QuantType::Int8;
  differs(quant, "quantization");
  // The weights' content, and the tokenizer's (its chat template included).
  writeText(tmp / "text_encoder" / "model.safetensors", "weights v2");
  differs(o, "weights");
  writeText(tmp / "tokenizer" / "chat_template.jinja", std::string(kQwenTemplate) + " ");
  differs(o, "template file");
  // Layers the model does not have are refused before anything is read.
  layers.outLayers = {31};
  EXPECT_THROW(flux2TextEncoderIdentity(files, Flux2TextEncoderKind::kQwen3, layers), ConfigError);

  json gpt2 = cfg;
  gpt2["model_type"] = "gpt2";
  writeText(tmp / "text_encoder" / "config.json", gpt2.dump());
  try {
    flux2TextEncoderKindOf(files.encoder);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: key 'model_type': 'gpt2'"), std::string::npos) << e.what();
  }
}
