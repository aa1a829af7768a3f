#pragma once
// AdamW whose two moments are stored in 8 bits (train.optimizer: adamw8bit), the
// optimizer ai-toolkit's FLUX configs name. Each parameter's moments are cut into
// blocks of kBlock8 values; a block keeps its largest magnitude (float32) and one
// byte per value: the index of the nearest entry of a fixed 256-entry table of
// fractions of that maximum. The table is dense near the maximum and spans eight
// decades below it (the first moment's is signed), so small and large values of a
// block both keep a few percent of precision. The update itself is AdamW's, done
// in float32 on the dequantized moments, which are then quantized again.
//
// State: 2 bytes per parameter plus 8 bytes per block against AdamW's 8 bytes per
// parameter. At FLUX.1-dev's rank-16 LoRA with the peer's targets (65M parameters)
// that is 0.13 GiB instead of 0.49 GiB. The parameters stay float32 masters.
//
// The step works on all of a device's parameters at once, in chunks of about 8M
// values (a few dozen kernels each): per-tensor steps would be ~20 launches for each
// of FLUX's ~1,000 LoRA tensors. Between steps each parameter's state holds views
// of its chunk's buffers, so the state is per parameter for checkpoints and for
// placement (OptimizerStateAttachment moves and audits it like AdamW's).
#include <torch/optim/adamw.h>

#include <string>
#include <utility>
#include <vector>

#include "placement/OptimizerStateAttachment.h"
#include "train/LoraOptimizer.h"

namespace strata::train {

constexpr int64_t kBlock8 = 256;  // values per block; one float32 maximum each

// The 256 fractions of a block's maximum a code stands for, ascending: signed
// (first moment: -1 .. 1, zero included) or unsigned (second moment: 0 .. 1).
// Float32 on `device`, cached.
const at::Tensor& blockwise8Table(bool isSigned, const c10::Device& device);

// x (float32, numel a multiple of kBlock8) -> codes (uint8, x's numel) and block
// maxima (float32, numel / kBlock8): the nearest table entry of each value. In the
// unsigned form a positive value never becomes code 0, so a second moment that is
// not zero never reads back as zero (which would divide the update by eps).
struct Blockwise8 {
  at::Tensor codes;
  at::Tensor absmax;
};
Blockwise8 quantizeBlockwise8(const at::Tensor& x, bool isSigned);
// codes and block maxima -> float32 values (codes' numel).
at::Tensor dequantizeBlockwise8(const at::Tensor& codes, const at::Tensor& absmax, bool isSigned);

// Optimizer state bytes per trainable parameter, for the planner: AdamW's two moments
// in the parameters' dtype, or two bytes and a float32 maximum per block of each moment.
inline double optimizerStateBytesPerParam(bool eightBit, int64_t paramElementBytes) {
  return eightBit ? 2.0 + 8.0 / kBlock8 : 2.0 * static_cast<double>(paramElementBytes);
}

// numel rounded up to whole blocks: the length of a parameter's codes.
inline int64_t blockwise8Length(int64_t numel) { return (numel + kBlock8 - 1) / kBlock8 * kBlock8; }

// The state of one parameter. Before its first step the tensors are undefined
// (zero moments, as AdamW starts).
class AdamW8bitParamState final : public torch::optim::OptimizerCloneableParamState<AdamW8bitParamState>,
                                  public placement::SelfDescribingOptimizerState {
 public:
  int64_t step = 0;
  at::Tensor avgCodes, avgAbsmax;  // first moment: uint8 [blockwise8Length(n)], float32 [blocks]
  at::Tensor sqCodes, sqAbsmax;    // second moment, likewise

  // Float32 moments of the parameter's shape (zeros before the first step).
  at::Tensor expAvg(const at::Tensor& param) const;
  at::Tensor expAvgSq(const at::Tensor& param) const;
  // Sets the moments from float values of the parameter's shape (a checkpoint of
  // plain AdamW), quantizing them.
  void setMoments(const at::Tensor& expAvg, const at::Tensor& expAvgSq);

  std::vector<std::pair<std::string, at::Tensor>> stateTensors() const override;
  void moveStateTo(const c10::Device& device) override;
};

class AdamW8bit : public LoraOptimizer {
 public:
  AdamW8bit(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults = {});
  // amsgrad is refused (it would need a third state); sparse gradients too.
  at::Tensor step(LossClosure closure = nullptr) override;

  // The state of `param`, or nullptr before its first step (or for a parameter of
  // another optimizer).
  AdamW8bitParamState* stateOf(const at::Tensor& param);
};

}  // namespace strata::train
