#pragma once
// The one parameter-plan description every model family and text encoder uses:
// a unit's modules as ModuleSpec rows (the rows the model is built from, through
// nn::UnitBuilder), and the per-unit plan counted from those rows, which the
// planner (placement/) and the LoRA rules read. Pure: no tensors, no model built,
// so a plan equals the built model's named_parameters() by construction.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace strata::nn {

// One module of a unit, in the order it is built and registered (which is the
// order a fresh model's random init draws in).
struct ModuleSpec {
  enum class Type {
    Linear,     // weight [out, in] (+ bias [out])
    RmsNorm,    // weight [dim]: outFeatures
    LayerNorm,  // weight [dim] + bias [dim]: outFeatures
    Embedding,  // weight [rows, dim]: inFeatures rows of outFeatures
  };
  // Inside a block relative to it ("attn.to_q"); in a stem or head the model path ("x_embedder").
  std::string path;
  Type type = Type::Linear;
  int64_t inFeatures = 0;   // Linear: in; Embedding: rows; norms: their dim
  int64_t outFeatures = 0;  // Linear: out (rows of its weight); Embedding, norms: their dim
  bool bias = true;         // Linear only

  int64_t paramCount() const;
};

// The entry at `path` in `layout`, or null.
const ModuleSpec* findModuleSpec(const std::vector<ModuleSpec>& layout, const std::string& path);

// Every parameter of `layout` as (prefix + path + ".weight" / ".bias", shape), in the
// order the built modules list them in named_parameters(): what a streamed load
// checks a file against before anything is built.
std::vector<std::pair<std::string, std::vector<int64_t>>> paramShapes(const std::string& prefix,
                                                                      const std::vector<ModuleSpec>& layout);

// One Linear of a model, by its module path in the model.
struct LinearShape {
  std::string path;  // "transformer_blocks.0.attn.to_q", "model.layers.0.self_attn.q_proj"
  int64_t inFeatures = 0;
  int64_t outFeatures = 0;
  bool bias = true;
};

// One placement unit's parameters; ids equal nn::BlockSlot::id.
struct UnitPlan {
  std::string id;    // "stem", "transformer_blocks.3", "model.layers.0", "head"
  std::string kind;  // "stem", "double", "single", "layer", "head"
  int64_t paramCount = 0;
  std::vector<LinearShape> linears;  // every Linear in it, in the model's order
};

// Counts `layout` into a unit; its Linears named `prefix` + path ("transformer_blocks.3.").
UnitPlan planUnit(std::string id, std::string kind, const std::string& prefix, const std::vector<ModuleSpec>& layout);

struct ParamPlan {
  UnitPlan stem;
  std::vector<UnitPlan> blocks;  // forward order
  UnitPlan head;
  int64_t totalParams() const;
};

// Appends blocks `first` .. `first + count - 1` of one layout to plan.blocks, each
// with id `idPrefix` + index ("model.layers.3") and its Linears named below it.
void addBlocks(ParamPlan& plan, const std::string& idPrefix, const std::string& kind, int64_t first, int64_t count,
               const std::vector<ModuleSpec>& layout);

}  // namespace strata::nn
