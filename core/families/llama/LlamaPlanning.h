#pragma once
// The planner's input for a Llama-family model from its config alone (no weights
// read): per-unit parameters from llama::llamaParamPlan (the description the
// modules are built from), the LoRA-targeted Linears, and the memory-mode
// activation estimate of a KV-free training step at `seqLen` tokens. For
// `strata-train plan` and the trainer once they run this family; devices are
// the caller's to fill, as with runPlanInput.
#include <cstdint>
#include <string>
#include <vector>

#include "models/llama/LlamaConfig.h"
#include "placement/Planner.h"

namespace strata::families {

struct LlamaPlanOptions {
  int64_t weightElementBytes = 2;        // fp16 / bf16 base weights; fp32 = 4, fp8 (quantized) = 1
  int64_t activationElementBytes = 2;    // the compute dtype
  int64_t loraRank = 8;                  // 0 = no adapters
  std::vector<std::string> loraTargets;  // LoraTargets patterns; empty = peft's seven projections
  bool ema = false;
  int64_t loraElementBytes = 4;         // network.dtype: fp32 4, bf16 2
  double optimizerBytesPerParam = 8.0;  // AdamW; adamw8bit ~2 (train/AdamW8bit.h)
  bool offloadOptimizerState = false;   // train.offload_optimizer_state: in host memory, staged for the step
  int64_t batchSize = 1;
  int64_t seqLen = 512;  // max_seq_len: every sample padded or cut to it
  bool gradientCheckpointing = true;
  // Weight-only quantization of the decoder layers' Linears (model.quantize):
  // 1-byte weights, and one float32 scale per output row (int8, qfloat8) or per
  // Linear (float8_e4m3). Embeddings, norms and lm_head stay in the dtype.
  bool quantize = false;
  bool perRowScales = true;
  // model.fp8_keep_transpose: each fp8 layer Linear (dims multiples of 16) keeps a
  // transposed copy, 1 byte per weight (an upper bound: the first layer's q/k/v read
  // the embeddings, which need no gradient, and keep none).
  bool keptTransposes = false;
};

// Memory mode. Layers: weights, adapters (+ grads, AdamW state, EMA) and the
// activations of llamaActivationElementsPerTokenPerHidden; the head also keeps
// the float32 log-softmax of the logits [B, L, vocab] for the loss (4 bytes an
// element) and needs the logits and their float32 copy while the loss is formed
// (6 bytes an element, workspace). The mode is memory; the caller may change it.
placement::PlannerInput llamaPlannerInput(const llama::LlamaConfig& cfg, const LlamaPlanOptions& options);

}  // namespace strata::families
