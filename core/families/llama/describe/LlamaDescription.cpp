#include "families/llama/describe/LlamaDescription.h"

#include <filesystem>

#include "config/KeyRows.h"
#include "config/Validator.h"
#include "io/FileBytes.h"

namespace strata::families {

using config::DatasetType;
using config::ExportFormat;
namespace rows = config::rows;
namespace fs = std::filesystem;

namespace {

// A causal LM's keys: the jsonl dataset's fields and text sampling.
std::vector<config::KeyRow> llamaKeys() {
  return {
      {rows::keyRow("datasets[].file_path", STRATA_KEY_DATASET(filePath),
                    "jsonl: the file, one JSON object (one sample) per line",
                    rows::Opt().file().look("JSONL file", "Dataset", true).datasetTypes({DatasetType::Jsonl})),
       "datasets[].cache_latents_to_disk"},
      {rows::keyRow("datasets[].prompt_field", STRATA_KEY_DATASET(promptField),
                    "jsonl: the field holding the prompt (no loss on it)",
                    rows::Opt().look("Prompt field", "Dataset").datasetTypes({DatasetType::Jsonl})),
       "datasets[].file_path"},
      {rows::keyRow("datasets[].response_field", STRATA_KEY_DATASET(responseField),
                    "jsonl: the field holding the response (the loss is on it)",
                    rows::Opt().look("Response field", "Dataset").datasetTypes({DatasetType::Jsonl})),
       "datasets[].prompt_field"},
      {rows::keyRow(
           "datasets[].text_field", STRATA_KEY_DATASET(textField),
           "jsonl: one field holding prompt, response_marker and response; empty = prompt_field + response_field",
           rows::Opt().look("Text field (prompt and response in one)", "Dataset").datasetTypes({DatasetType::Jsonl})),
       "datasets[].response_field"},
      {rows::keyRow("datasets[].response_marker", STRATA_KEY_DATASET(responseMarker),
                    "jsonl with text_field: the response starts after this text (it stays in the prompt part)",
                    rows::Opt().look("Response marker", "Dataset").datasetTypes({DatasetType::Jsonl})),
       "datasets[].text_field"},
      {rows::keyRow("datasets[].max_seq_len", STRATA_KEY_DATASET(maxSeqLen),
                    "jsonl: tokens per sample; longer samples are cut (and counted)",
                    rows::Opt()
                        .unit("tokens")
                        .min(2)
                        .max(1048576)
                        .look("Tokens per sample", "Dataset", true)
                        .datasetTypes({DatasetType::Jsonl, DatasetType::Synthetic})),
       "datasets[].response_marker"},
      {rows::keyRow("datasets[].padding_side", STRATA_KEY_DATASET(paddingSide),
                    "jsonl: where a shorter sample of a batch is padded",
                    rows::Opt().look("Pad on the", "Dataset").datasetTypes({DatasetType::Jsonl})),
       "datasets[].max_seq_len"},
      {rows::keyRow("datasets[].packing", STRATA_KEY_DATASET(packing),
                    "jsonl: join several samples into each row of max_seq_len tokens",
                    rows::Opt().look("Pack several samples per row", "Dataset").datasetTypes({DatasetType::Jsonl})),
       "datasets[].padding_side"},
      {rows::keyRow("sample.max_new_tokens", STRATA_KEY_MEMBER(sample.maxNewTokens),
                    "Tokens generated per sample prompt (causal LM)",
                    rows::Opt().unit("tokens").min(1).max(1048576).look("Tokens per sample", "Samples")),
       "sample.guidance_scale"},
      {rows::keyRow("sample.temperature", STRATA_KEY_MEMBER(sample.temperature),
                    "Sampling temperature (causal LM): 0 = greedy, else drawn with sample.seed",
                    rows::Opt().min(0).max(100).look("Temperature (0 = greedy)", "Samples")),
       "sample.max_new_tokens"},
  };
}

// A causal LM reads its shape from config.json, even with random weights.
void modelPath(config::RuleContext& ctx) {
  const config::ModelConfig& m = ctx.config().model;
  // (A missing folder is said once, before this.)
  const bool missing = !m.randomWeights && !io::pathProblem(m.nameOrPath).empty();
  if (!m.nameOrPath.empty() && !missing && !fs::exists(fs::path(m.nameOrPath) / "config.json"))
    ctx.error("model.name_or_path", m.nameOrPath + ": no config.json there",
              config::looksLikeHubId(m.nameOrPath) && !fs::exists(m.nameOrPath)
                  ? config::hubDownloadHint(m.nameOrPath)
                  : "give the model folder that transformers' save_pretrained writes (with random_weights: a "
                    "folder holding only config.json is enough)");
}

// A causal LM's dataset: jsonl (the fields it reads) or synthetic (random tokens).
void dataset(config::RuleContext& ctx, size_t i) {
  const config::DatasetConfig& d = ctx.config().datasets[i];
  const std::string at = "datasets[" + std::to_string(i) + "].";
  if (d.type != DatasetType::Jsonl && d.type != DatasetType::Synthetic) {
    ctx.error(at + "type",
              "a " + ctx.config().model.arch + " model trains on a jsonl or synthetic dataset, not " +
                  config::enumName(d.type),
              "use type: jsonl with file_path (one JSON object per line)");
    return;
  }
  if (d.type != DatasetType::Jsonl) return;
  if (d.textField.empty()) {
    if (d.promptField.empty()) ctx.error(at + "prompt_field", "must not be empty", "e.g. prompt (or set text_field)");
    if (d.responseField.empty()) ctx.error(at + "response_field", "must not be empty", "e.g. response");
    if (!d.promptField.empty() && d.promptField == d.responseField)
      ctx.error(at + "response_field", "is the same field as prompt_field (" + d.promptField + ")");
  } else if (d.responseMarker.empty()) {
    ctx.error(at + "response_marker", "a text_field dataset needs the marker where the response starts",
              "e.g. \"### OUTPUT:\"");
  }
}

}  // namespace

config::FamilyDescription describeLlama() {
  config::FamilyDescription d;
  d.id = "llama";
  d.displayName = "Llama";
  d.title = "Llama-family language-model LoRA (Llama, Mistral, Qwen2)";
  d.keys = llamaKeys();
  d.keyDocs = {
      {"model.name_or_path",
       "Causal LM folder as transformers writes it: config.json and the .safetensors (local; with random_weights "
       "config.json alone)"},
      {"model.tokenizer_path",
       "The tokenizer's folder (tokenizer.json or tokenizer.model); empty = model.name_or_path"},
      {"train.batch_size", "Token rows (samples of max_seq_len tokens) per forward pass"},
      {"train.offload_checkpoints",
       "With gradient checkpointing: keep each decoder layer's saved input in pinned host memory, not on the GPU"},
      {"train.offload_optimizer_state",
       "adamw: keep the optimizer's moments in pinned host memory between steps, not on the GPU; each step copies "
       "them to the card in 64 MiB pieces and back (8 bytes per LoRA parameter less on the card): true, false, or "
       "auto (on the card where the plan fits with them there, in host memory elsewhere)"},
      {"datasets[].type", "jsonl (one JSON object per line) or synthetic (random tokens)"},
      {"sample.sample_every", "Generate text for sample.prompts every N steps; 0 = never"},
      {"sample.prompts", "Prompts the model continues at each sample"},
      {"save.export_formats", "LoRA written at each save: peft (an adapter folder)"},
  };
  d.datasetTypes = {DatasetType::Jsonl, DatasetType::Synthetic};
  d.exportFormats = {ExportFormat::Peft};
  d.acceptedFormats = {ExportFormat::Diffusers};  // the same peft folder (LlamaFamily::exportPathIn)
  d.hints.modelFolder =
      "point it at a local llama-family model folder (config.json and its .safetensors, as transformers' "
      "save_pretrained writes it; with random_weights: true, a folder holding only config.json)";
  d.hints.modelNotFound = "give the model folder (config.json and its .safetensors)";
  d.hints.lr = "1e-4 to 3e-4 is the usual rate for a LoRA on a causal LM";
  d.hints.noDataset = "add one, e.g. datasets: [{type: jsonl, file_path: /data/train.jsonl}]";
  d.hints.noExport = "add peft";
  d.hints.foreignFormat = "{format} is a FLUX file form; a llama model's LoRA is written as a peft adapter folder";
  d.hints.foreignFormatHint = "use export_formats: [peft]";
  // Decoder layers between the embedding (the stem) and the final norm + lm_head (the head).
  d.mapParts = {{"stem", "stem: embedding", "stem: embedding", "stem: embedding"},
                {"layer", "layer", "decoder layer", "decoder layer"},
                {"head", "head: norm + lm_head", "head: norm + lm_head", "head: norm + lm_head"}};
  d.rules.modelPath = modelPath;
  d.rules.dataset = dataset;
  d.cudnnAttention = false;  // cuDNN's attention is FLUX's; a causal LM's masked attention runs on flash / math
  d.readsModelWithRandomWeights = true;
  return d;
}

}  // namespace strata::families
