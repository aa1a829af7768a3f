#pragma once
// What core/lora needs from a model family (DESIGN §2b): the Linears an adapter
// may sit on, the ones it sits on by default, and how the family names a LoRA in
// each file form it supports. A family implements it next to its own name rules
// (FLUX: models/flux/FluxLoraRules.h); core/lora does everything else for every
// family: key suffixes, alpha, fusing and splitting, metadata, reading, writing.
// It lives in nn/ so a family implements it without depending on placement/.
//
// A LoRA file key is <stem><suffix>. The suffix is the form's (".lora_A.weight",
// ".lora_down.weight", ".alpha": core/lora's business). The stem is the family's:
// it names one module in the file's naming. A stem may hold several of the
// model's modules (a fused module: FLUX's BFL "double_blocks.0.img_attn.qkv" holds
// to_q, to_k and to_v); each module's slot then says which rows of the stem's
// up weight are its own. A family without fused modules (a causal LM in peft
// form: stem "base_model.model." + module path) gives every module a slot of its
// own: parts 1, rows = totalRows = the Linear's out features.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata::nn {

// The LoRA file forms. Which ones a family has is its rules' formats().
enum class LoraFileFormat {
  Diffusers,  // diffusers / peft: "<stem>.lora_A.weight" [r, in], ".lora_B.weight" [out, r], alpha folded into B
  Kohya,      // "<stem>.lora_down.weight", ".lora_up.weight", ".alpha"
  Comfy,      // "<stem>.lora_A.weight", ".lora_B.weight", ".alpha" (lora_down / lora_up read too)
};

inline const char* toString(LoraFileFormat format) {
  switch (format) {
    case LoraFileFormat::Diffusers:
      return "diffusers";
    case LoraFileFormat::Kohya:
      return "kohya";
    case LoraFileFormat::Comfy:
      return "comfy";
  }
  return "?";
}

// One Linear of the model by its module path.
struct LoraLinear {
  std::string path;  // "transformer_blocks.0.attn.to_q"
  int64_t inFeatures = 0;
  int64_t outFeatures = 0;
};

// Where one of the model's modules lives in a file: the stem, and its rows in it.
struct LoraSlot {
  std::string stem;         // "lora_unet_double_blocks_0_img_attn_qkv"
  int part = 0;             // index among the modules the stem holds, in row order
  int parts = 1;            // 1: the stem holds this module alone
  int64_t rowOffset = 0;    // first row of this module in the stem's up
  int64_t rows = 0;         // rows of this module (its out features)
  int64_t totalRows = 0;    // rows of the stem's up, every part
  bool swapHalves = false;  // the stem holds the two halves of this module's rows in the other order
  bool fused() const { return parts > 1; }
};

// What a stem read from a file names.
struct LoraStemMatch {
  LoraFileFormat format = LoraFileFormat::Diffusers;
  // The model modules the stem holds, in part order. Empty: the stem is in this
  // form's naming but names no module of the model (an error the reader reports).
  std::vector<std::pair<std::string, LoraSlot>> modules;
};

class LoraNameRules {
 public:
  virtual ~LoraNameRules() = default;

  // The family in messages: "FLUX.1".
  virtual std::string familyName() const = 0;
  // LoraTargets patterns of the Linears that get an adapter when a config names none.
  virtual std::vector<std::string> defaultTargets() const = 0;
  // Every Linear of the model, in the model's order.
  virtual std::vector<LoraLinear> linears() const = 0;
  // The forms this family reads and writes; others are refused.
  virtual std::vector<LoraFileFormat> formats() const = 0;

  // Writing: the stem and slot of `modulePath` in `format`; nullopt when the
  // module has no name in that form.
  virtual std::optional<LoraSlot> slotOf(const std::string& modulePath, LoraFileFormat format) const = 0;
  // Reading: the form of a file's stem and the modules it holds; nullopt when the
  // stem is in none of this family's namings.
  virtual std::optional<LoraStemMatch> matchStem(const std::string& stem) const = 0;

  // Prefix of the keys in peft's "lora_adapter_metadata" header entry: diffusers
  // writes "transformer.lora_alpha" for its transformer component; plain peft "".
  virtual std::string peftMetadataPrefix() const { return ""; }
  // The family's own header entries of an exported file (modelspec.architecture, ss_base_model_version, ...).
  virtual std::map<std::string, std::string> exportMetadata() const { return {}; }
  // Whether an export in `format` folds alpha/r into lora_B and writes no ".alpha":
  // the diffusers form always (peft reads no alpha tensor); another form where a
  // loader its users need refuses ".alpha" keys (diffusers' converter of FLUX.2's
  // ComfyUI form). A loader that finds no alpha scales by 1, so the result is the same.
  virtual bool foldsAlphaInto(LoraFileFormat format) const { return format == LoraFileFormat::Diffusers; }
};

}  // namespace strata::nn
