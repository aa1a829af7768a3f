#pragma once
// The one diffusers <-> BFL name engine of FLUX.1 and FLUX.2, driven by a model's
// name rows: module and parameter names both ways, with the slot a diffusers module
// occupies inside a fused BFL tensor (rows from the model's layout), and the LoRA
// stems of kohya ("lora_unet_" + BFL path, '.' -> '_') and ComfyUI
// ("diffusion_model." + BFL path). Blocks are "transformer_blocks.N" <->
// "double_blocks.N" and "single_transformer_blocks.N" <-> "single_blocks.N".
// Pure string functions over the rows, no tensors.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dit/ModuleSpec.h"

namespace strata::dit {

// Where a diffusers module's rows live inside a BFL tensor (dim 0 of weight and bias).
struct BflSlot {
  std::string module;       // BFL module path, "double_blocks.0.img_attn.qkv"
  int part = 0;             // index among the fused parts: q 0, k 1, v 2, mlp 3
  int parts = 1;            // number of fused parts; 1 = the whole tensor
  int64_t rowOffset = 0;    // first row of this part in the BFL tensor
  int64_t rows = 0;         // rows of the diffusers tensor
  int64_t totalRows = 0;    // rows of the whole BFL tensor
  bool swapHalves = false;  // norm_out.linear (scale, shift) = final_layer.adaLN_modulation.1 (shift, scale)
  bool fused() const { return parts > 1; }
};

struct BflParam {
  std::string key;  // BFL parameter key
  BflSlot slot;
};

// One name row: a diffusers module path and its BFL path, relative to a block or at
// the top level. Rows that share a BFL module are its fused parts, in row order by `part`.
struct BflRow {
  const char* diffusers;
  const char* bfl;
  int part = 0;
  bool rmsNorm = false;     // parameter "weight" is BFL's "scale"
  bool swapHalves = false;  // the final layer's modulation halves
};

struct BflRows {
  std::vector<BflRow> top;  // stem and head
  std::vector<BflRow> doubleBlock;
  std::vector<BflRow> singleBlock;
};

inline constexpr const char* kDiffusersLoraPrefix = "transformer.";
inline constexpr const char* kKohyaPrefix = "lora_unet_";
inline constexpr const char* kComfyPrefix = "diffusion_model.";

class BflNames {
 public:
  // `bounded`: only the modules this config has (a block index below its count, a row
  // its layout has). Else any block index, and the row of a module the config leaves
  // out (schnell's guidance embedder) has 0 rows.
  BflNames(BflRows rows, const UnitLayout& layout, int64_t numLayers, int64_t numSingleLayers, bool bounded);

  // diffusers module path ("transformer_blocks.0.attn.to_k") -> its BFL slot.
  std::optional<BflSlot> bflSlotForModule(const std::string& diffusersModule) const;
  // BFL module path -> the diffusers modules it holds, in row order (one unless fused).
  std::vector<std::pair<std::string, BflSlot>> diffusersModulesForBfl(const std::string& bflModule) const;
  // The same on parameter keys: "transformer_blocks.0.attn.norm_q.weight" <->
  // "double_blocks.0.img_attn.norm.query_norm.scale" (RMSNorm weight <-> scale).
  std::optional<BflParam> bflParamForKey(const std::string& diffusersKey) const;
  std::vector<std::pair<std::string, BflSlot>> diffusersKeysForBflKey(const std::string& bflKey) const;

  bool isBflModule(const std::string& bflModule) const;
  // kohya LoRA module name of a BFL module: "lora_unet_double_blocks_0_img_attn_qkv".
  static std::string kohyaFromBflModule(const std::string& bflModule);
  // Back to the BFL path; nullopt when the name is not a module of these rows.
  std::optional<std::string> bflModuleFromKohya(const std::string& kohyaName) const;
  // ComfyUI LoRA module name: "diffusion_model.double_blocks.0.img_attn.qkv".
  static std::string comfyFromBflModule(const std::string& bflModule);
  // Accepts "diffusion_model." and "model.diffusion_model."; nullopt otherwise or
  // when the path is not a module of these rows.
  std::optional<std::string> bflModuleFromComfy(const std::string& comfyName) const;

 private:
  enum class Where { Top, Double, Single };
  struct Split {
    Where where = Where::Top;
    std::string index;  // decimal, empty at the top level
    std::string rest;
  };
  struct Found {
    const BflRow* row;
    Where where;
    std::string bflModule;
  };
  struct FoundParts {
    Where where = Where::Top;
    std::vector<std::pair<const BflRow*, std::string>> parts;  // row, diffusers module path
  };

  const std::vector<BflRow>& rowsFor(Where where) const;
  const std::vector<ModuleSpec>& layoutFor(Where where) const;
  bool has(Where where, const std::string& index, const BflRow& row) const;
  BflSlot makeSlot(const BflRow& r, Where where, const std::string& bflModule) const;
  std::optional<Found> findFromDiffusers(const std::string& module) const;
  FoundParts findFromBfl(const std::string& bflModule) const;

  BflRows rows_;
  std::vector<ModuleSpec> top_, double_, single_;
  int64_t numLayers_;
  int64_t numSingleLayers_;
  bool bounded_;
};

}  // namespace strata::dit
