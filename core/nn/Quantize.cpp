#include "nn/Quantize.h"

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "nn/Linear.h"
#include "nn/QuantizedWrite.h"

#include <algorithm>

namespace strata::nn {

namespace {
constexpr double kInt8Max = 127.0;
constexpr double kFloat8E4m3Max = 448.0;
constexpr int64_t kChunkElements = int64_t{1} << 20;  // float32 workspace: 4 MB a temporary
}  // namespace

const std::vector<std::string>& quantTypeNames() {
  static const std::vector<std::string> k = {"int8", "qfloat8", "float8_e4m3"};
  return k;
}

QuantType quantTypeFromName(const std::string& name) {
  if (name == "int8") return QuantType::Int8;
  if (name == "qfloat8") return QuantType::QFloat8;
  if (name == "float8_e4m3" || name == "float8" || name == "float8_e4m3fn") return QuantType::Float8E4m3;
  throw ConfigError("quantization type '" + name + "' is unknown; Strata knows int8, qfloat8, float8_e4m3");
}

const char* quantTypeName(QuantType t) {
  switch (t) {
    case QuantType::None:
      return "none";
    case QuantType::Int8:
      return "int8";
    case QuantType::QFloat8:
      return "qfloat8";
    case QuantType::Float8E4m3:
      return "float8_e4m3";
  }
  return "?";
}

bool isFloat8(QuantType t) { return t == QuantType::QFloat8 || t == QuantType::Float8E4m3; }
bool perRowScale(QuantType t) { return t == QuantType::Int8 || t == QuantType::QFloat8; }
bool quantTypeAvailable(QuantType t) { return !isFloat8(t) || compat::kHasFloat8; }
void requireQuantTypeAvailable(QuantType t) {
  if (!quantTypeAvailable(t))
    throw ConfigError(std::string("quantization type ") + quantTypeName(t) +
                      " needs float8 tensors, which this LibTorch does not have; use int8");
}

QuantizedWeight quantizeWeight(const at::Tensor& w, QuantType t) {
  if (t == QuantType::None) throw ConfigError("quantizeWeight: no quantization type given");
  if (w.dim() != 2)
    throw ConfigError("quantizeWeight: expected a [out, in] weight, got " + std::to_string(w.dim()) + " dims");
  requireQuantTypeAvailable(t);
  at::NoGradGuard noGrad;
  const double qmax = isFloat8(t) ? kFloat8E4m3Max : kInt8Max;
  // Rows are converted to float32 a chunk at a time: the workspace is bounded by
  // kChunkElements, not 17 bytes per weight (a streamed load's peak is one block
  // in bf16 plus this). Row-wise and element-wise ops: the same bits as at once.
  const int64_t rows = w.size(0);
  const int64_t step = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, w.size(1)));
  std::vector<at::Tensor> rowAmax;
  for (int64_t r = 0; r < rows; r += step)
    rowAmax.push_back(w.narrow(0, r, std::min(step, rows - r)).detach().to(at::kFloat).abs().amax({1}));
  at::Tensor amax = rowAmax.empty() ? at::zeros({0}, w.options().dtype(at::kFloat)) : at::cat(rowAmax);  // [out]
  if (!perRowScale(t)) amax = amax.amax().reshape({1});                                                  // [1]
  at::Tensor scale = at::where(amax > 0, amax / qmax, at::ones_like(amax));
  QuantizedWeight q;
  q.data = at::empty(w.sizes(), w.options().dtype(isFloat8(t) ? compat::float8E4m3Type() : at::kChar));
  for (int64_t r = 0; r < rows; r += step) {
    const int64_t n = std::min(step, rows - r);
    const auto wf = w.narrow(0, r, n).detach().to(at::kFloat);
    const auto scaled = wf / (perRowScale(t) ? scale.narrow(0, r, n).unsqueeze(1) : scale);  // [n, in] in [-qmax, qmax]
    q.data.narrow(0, r, n).copy_(isFloat8(t) ? scaled.clamp(-qmax, qmax) : scaled.round().clamp(-qmax, qmax));
  }
  q.scale = scale.contiguous();
  return q;
}

at::Tensor dequantizeWeight(const at::Tensor& data, const at::Tensor& scale, at::ScalarType dtype) {
  const auto s = scale.numel() == 1 ? scale.reshape({1, 1}) : scale.unsqueeze(1);  // [out, 1] or [1, 1]
  return (data.to(at::kFloat) * s).to(dtype);
}

int64_t quantizeLinears(torch::nn::Module& module, QuantType t) {
  int64_t n = 0;
  for (const auto& m : module.modules(/*include_self=*/true)) {
    if (auto* lin = dynamic_cast<LinearImpl*>(m.get())) {
      if (lin->quantType() != QuantType::None) continue;
      lin->quantize(t);
      ++n;
    }
  }
  return n;
}

void requireUnquantized(const torch::nn::Module& module, const std::string& writer) {
  auto check = [&](const torch::nn::Module* m, const std::string& path) {
    const auto* lin = dynamic_cast<const LinearImpl*>(m);
    if (!lin || lin->quantType() == QuantType::None) return;
    throw Error(writer + ": the Linear " + path + " is quantized (" + quantTypeName(lin->quantType()) +
                "): its weight is 1-byte storage whose scale no file format here holds, and would reload as "
                "garbage; write the float base (the model loaded without model.quantize) instead");
  };
  // Itself apart: include_self needs a module held by a shared_ptr (models live on the stack too).
  check(&module, "(the model itself)");
  for (const auto& item : module.named_modules("", /*include_self=*/false))
    check(item.value().get(), "'" + item.key() + "'");
}

bool fp8MatmulQualifies(int64_t inFeatures, int64_t outFeatures, QuantType t) {
  return isFloat8(t) && inFeatures % 16 == 0 && outFeatures % 16 == 0;
}

std::string fp8MatmulSummary(const Fp8MatmulCount& c) {
  std::string s = "fp8 matmul: " + std::to_string(c.fp8) + " Linears";
  if (c.fallback > 0)
    s += " (" + std::to_string(c.fallback) + " keep the dequantizing matmul: a dim not a multiple of 16)";
  return s;
}

Fp8MatmulCount enableFp8Matmul(torch::nn::Module& module, Fp8Backward backward) {
  Fp8MatmulCount c;
  for (const auto& m : module.modules(/*include_self=*/true)) {
    auto* lin = dynamic_cast<LinearImpl*>(m.get());
    if (!lin || !isFloat8(lin->quantType())) continue;
    if (lin->useFp8Matmul(backward))
      ++c.fp8;
    else
      ++c.fallback;
  }
  return c;
}

bool checkFp8Matmul(torch::nn::Module& module, at::ScalarType dtype) {
  for (const auto& m : module.modules(/*include_self=*/true)) {
    auto* lin = dynamic_cast<LinearImpl*>(m.get());
    if (!lin || !lin->fp8Matmul()) continue;
    const auto device = lin->weight.device();
    try {
      at::NoGradGuard noGrad;
      (void)lin->forwardBase(at::zeros({16, lin->inFeatures()}, at::TensorOptions().dtype(dtype).device(device)));
    } catch (const std::exception& e) {
      throw Error("the fp8 matmul does not run on " + device.str() + " (a " + std::to_string(lin->inFeatures()) +
                  " x " + std::to_string(lin->outFeatures()) + " Linear): " + e.what());
    }
    return true;
  }
  return false;
}

}  // namespace strata::nn
