// Parity of FLUX.2's text side with the "flux2_pipeline" fixtures (diffusers
// Flux2Pipeline with a Mistral-3 text encoder, Flux2KleinPipeline with Qwen3): the
// templated texts, ids and attention masks (exact), each tapped hidden state, the
// prompt embeddings, the empty prompt's embeddings where the pipeline samples with
// true CFG, and the text ids. Everything is read from the folder and its manifest
// (layers, max_sequence_length, padding side, truncation), so other fixtures of the
// kind are checked the same way; the text encoder's file is also rewritten in the
// other Mistral-3 key layout and must give the same hidden states.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <set>

#include "common/TestSupport.h"
#include "families/flux2/Flux2Prompts.h"
#include "families/flux2/Flux2TextEncoder.h"
#include "io/Safetensors.h"
#include "models/llama/LlamaCheckpoint.h"
#include "models/llama/LlamaForCausalLM.h"
#include "parity/Flux2PipelineFixture.h"
#include "parity/ParityRegistry.h"

namespace fs = std::filesystem;
using namespace strata;
using families::Flux2PromptEncoder;
using families::Flux2TextEncoderFiles;
using families::Flux2TextEncoderOptions;
using parity::Flux2PipelineFixture;

namespace {

std::vector<std::string> promptsOf(const nlohmann::json& manifest) {
  return manifest.at("prompts").get<std::vector<std::string>>();
}

Flux2TextEncoderOptions optionsOf(const nlohmann::json& manifest) {
  Flux2TextEncoderOptions o;
  o.maxSequenceLength = manifest.at("max_sequence_length").get<int64_t>();
  o.outLayers = manifest.at("text_encoder_out_layers").get<std::vector<int64_t>>();
  return o;
}

void expectClose(const Flux2PipelineFixture& f, const std::string& name, const at::Tensor& ours) {
  ASSERT_TRUE(f.outputs.count(name)) << name << " is not in outputs.safetensors";
  const auto& ref = f.outputs.at(name);
  ASSERT_EQ(ours.sizes(), ref.sizes()) << name;
  const auto tol = f.toleranceFor(name);
  EXPECT_TRUE(test::allClose(ours.to(at::kFloat), ref, tol.atol, tol.rtol)) << name;
  std::cout << "[parity]     " << name << ": max |diff| "
            << (ours.to(at::kFloat).cpu() - ref).abs().max().item<double>() << " (atol " << tol.atol << ")\n";
}

void checkPromptIds(const fs::path& dir, const nlohmann::json& manifest) {
  Flux2PipelineFixture f(dir, manifest);
  const auto files = Flux2TextEncoderFiles::fromDiffusersFolder(f.modelDir());
  const auto kind = families::flux2TextEncoderKindOf(files.encoder);
  EXPECT_EQ(kind == families::Flux2TextEncoderKind::kMistral3, f.variant() == "dev") << "variant " << f.variant();
  const auto tok = families::Flux2PromptTokenizer::open(files.tokenizer, kind);
  EXPECT_TRUE(tok.notes().empty()) << "the fixture's chat template is FLUX.2's: " << tok.notes().front();
  EXPECT_EQ(tok.paddingSide() == families::PaddingSide::kLeft ? "left" : "right",
            manifest.at("padding_side").get<std::string>());
  EXPECT_EQ(tok.padId(), manifest.at("pad_token_id").get<int64_t>());
  if (manifest.contains("system_message") && manifest.at("system_message").is_string())
    EXPECT_EQ(std::string(families::kFlux2SystemMessage), manifest.at("system_message").get<std::string>());

  const auto maxLength = manifest.at("max_sequence_length").get<int64_t>();
  const auto p = tok.tokenize(promptsOf(manifest), maxLength);
  EXPECT_EQ(p.texts, manifest.at("templated_texts").get<std::vector<std::string>>());
  EXPECT_EQ(p.lengths, manifest.at("token_counts_before_padding").get<std::vector<int64_t>>());
  std::vector<int64_t> truncated;
  for (size_t i = 0; i < p.dropped.size(); ++i)
    if (p.dropped[i] > 0) truncated.push_back(static_cast<int64_t>(i));
  EXPECT_EQ(truncated, manifest.at("truncated").get<std::vector<int64_t>>());
  ASSERT_EQ(p.ids.sizes(), f.outputs.at("input_ids").sizes());
  EXPECT_TRUE(at::equal(p.ids, f.outputs.at("input_ids").to(at::kLong))) << "input_ids";
  EXPECT_TRUE(at::equal(p.mask, f.outputs.at("attention_mask").to(at::kLong))) << "attention_mask";

  // text_ids: (0, 0, 0, l) per token.
  const auto& ref = f.outputs.at("text_ids");
  EXPECT_TRUE(at::equal(families::flux2TextIds(ref.size(0), ref.size(1)), ref.to(at::kLong))) << "text_ids";
}

void checkHiddenStatesAndEmbeds(const fs::path& dir, const nlohmann::json& manifest) {
  Flux2PipelineFixture f(dir, manifest);
  const auto enc =
      Flux2PromptEncoder::load(Flux2TextEncoderFiles::fromDiffusersFolder(f.modelDir()), optionsOf(manifest));
  // Only the layers up to the last tapped one are built.
  const auto layers = manifest.at("text_encoder_out_layers").get<std::vector<int64_t>>();
  EXPECT_EQ(static_cast<int64_t>(enc->model()->layerCount()), *std::max_element(layers.begin(), layers.end()));

  // On the reference ids and mask: each hidden state, padding positions included.
  const auto states = enc->hiddenStates(f.outputs.at("input_ids"), f.outputs.at("attention_mask"));
  ASSERT_EQ(states.size(), layers.size());
  for (size_t i = 0; i < layers.size(); ++i) expectClose(f, "hidden_state_" + std::to_string(layers[i]), states[i]);
  expectClose(f, "prompt_embeds", Flux2PromptEncoder::stackHiddenStates(states));

  // From the prompts, end to end, through the image path's interface.
  families::Flux2TextEncoder te(enc);
  const auto e = te.encode(promptsOf(manifest));
  EXPECT_FALSE(e.mask.defined()) << "FLUX.2's transformer sees every position";
  EXPECT_FALSE(e.pooled.defined());
  expectClose(f, "prompt_embeds", e.tokens);
  EXPECT_EQ(te.sequenceLength(), manifest.at("max_sequence_length").get<int64_t>());

  // True CFG's negative: the empty prompt, once per row.
  if (f.outputs.count("negative_prompt_embeds")) {
    const auto& ref = f.outputs.at("negative_prompt_embeds");
    const auto empty = te.emptyPromptEmbedding();  // [L, K*d]
    expectClose(f, "negative_prompt_embeds", empty.unsqueeze(0).expand({ref.size(0), -1, -1}));
  }
}

// The text encoder's file rewritten in the other Mistral-3 key layout (language_model.model.*
// <-> model.language_model.*, the vision keys moved along): the same hidden states.
void checkOtherKeyLayout(const fs::path& dir, const nlohmann::json& manifest) {
  Flux2PipelineFixture f(dir, manifest);
  const auto files = Flux2TextEncoderFiles::fromDiffusersFolder(f.modelDir());
  const auto weights = llama::openLlamaWeights(files.encoder);
  const auto layout = llama::detectLlamaKeyLayout(weights);
  if (layout == llama::LlamaKeyLayout::kCausalLm) {
    // Qwen3ForCausalLM has one layout; the vision keys and the other layout are Mistral-3's.
    EXPECT_EQ(families::flux2TextEncoderKindOf(files.encoder), families::Flux2TextEncoderKind::kQwen3);
    return;
  }
  const auto other = layout == llama::LlamaKeyLayout::kMistral3 ? llama::LlamaKeyLayout::kMistral3Legacy
                                                                : llama::LlamaKeyLayout::kMistral3;
  // The vision tower and projector: "model." in front in the current layout only.
  auto moved = [&](const std::string& key) -> std::string {
    if (auto modelKey = llama::llamaModelKey(key, layout)) return llama::llamaFileKey(*modelKey, other);
    const std::string bare = layout == llama::LlamaKeyLayout::kMistral3 ? key.substr(6) : key;
    return other == llama::LlamaKeyLayout::kMistral3 ? "model." + bare : bare;
  };
  test::TempDir tmp;
  const fs::path folder = tmp / "text_encoder";
  fs::create_directories(folder);
  fs::copy_file(files.encoder / "config.json", folder / "config.json");
  std::vector<std::pair<std::string, at::Tensor>> renamed;
  std::set<std::string> skipped;
  for (const auto& [key, shape] : weights.shapes()) {
    renamed.emplace_back(moved(key), weights.tensor(key).clone());
    if (!llama::llamaSkippedPart(key, layout).empty()) skipped.insert(moved(key));
  }
  io::writeSafetensors(folder / "model.safetensors", renamed);
  const auto reopened = llama::openLlamaWeights(folder);
  ASSERT_EQ(llama::detectLlamaKeyLayout(reopened), other);
  EXPECT_FALSE(skipped.empty()) << "a Mistral-3 file holds a vision tower";
  for (const auto& key : skipped) EXPECT_FALSE(llama::llamaSkippedPart(key, other).empty()) << key;

  const auto options = optionsOf(manifest);
  const auto a = Flux2PromptEncoder::load(files, options);
  const auto b = Flux2PromptEncoder::load({folder, files.tokenizer}, options);
  const auto& ids = f.outputs.at("input_ids");
  const auto& mask = f.outputs.at("attention_mask");
  const auto sa = a->hiddenStates(ids, mask);
  const auto sb = b->hiddenStates(ids, mask);
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(at::equal(sa[i], sb[i])) << "hidden state " << i;

  // A key in neither layout fails the strict load, named.
  renamed.emplace_back("language_model.extra.weight", at::zeros({2}));
  io::writeSafetensors(folder / "model.safetensors", renamed);
  try {
    Flux2PromptEncoder::load({folder, files.tokenizer}, options);
    ADD_FAILURE() << "a stray key was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("language_model.extra.weight"), std::string::npos) << e.what();
  }
}

}  // namespace

STRATA_PARITY_CHECK("flux2_pipeline", "text: template, input_ids, attention_mask, text_ids", checkPromptIds);
STRATA_PARITY_CHECK("flux2_pipeline", "text: hidden states, prompt_embeds, negative_prompt_embeds",
                    checkHiddenStatesAndEmbeds);
STRATA_PARITY_CHECK("flux2_pipeline", "text: the other text-encoder key layout gives the same hidden states",
                    checkOtherKeyLayout);
