// A minimal reproducer of the cuDNN attention failure of docs/design.md §4, with LibTorch
// alone (no Strata code): LibTorch 2.11 caches cuDNN's attention backward plan under q, k
// and v's sizes and strides, not the output gradient's. A second backward at the same
// q, k, v with a gradient of other strides runs the first one's plan.
//
//   strata_cudnn_sdpa_repro <order>   order: dense-then-narrow | narrow-then-dense | narrow-only
//
// "narrow": the output gradient [B, H, N, Dh] as a view of [B, N, H*Dh + 512] (a fused
// projection's concatenation gives one); "dense": in the output's own layout. Each
// backward's dq, dk, dv are compared with flash attention's for the same gradient.
// Exit 0 when every backward matched flash, 1 when one did not, 2 on a usage error;
// an illegal memory access ends the process with LibTorch's error.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace {

void onlyKernel(bool cudnn) {
  auto& c = at::globalContext();
  c.setSDPUseCuDNN(cudnn);
  c.setSDPUseFlash(!cudnn);
  c.setSDPUseMemEfficient(false);
  c.setSDPUseMath(false);
}

std::vector<at::Tensor> backward(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0,
                                 const at::Tensor& grad) {
  const auto q = q0.detach().requires_grad_(true);
  const auto k = k0.detach().requires_grad_(true);
  const auto v = v0.detach().requires_grad_(true);
  const auto out = at::scaled_dot_product_attention(q, k, v);
  return torch::autograd::grad({out}, {q, k, v}, {grad});
}

double worstRelativeL2(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& ref) {
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto r = ref[i].to(at::kDouble);
    const double d = (a[i].to(at::kDouble) - r).norm().item<double>() / r.norm().item<double>();
    w = std::isfinite(d) ? std::max(w, d) : INFINITY;
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string order = argc == 2 ? argv[1] : "";
  std::vector<std::string> sequence;
  if (order == "dense-then-narrow") sequence = {"dense", "narrow"};
  if (order == "narrow-then-dense") sequence = {"narrow", "dense"};
  if (order == "narrow-only") sequence = {"narrow"};
  if (sequence.empty()) {
    std::cerr << "usage: strata_cudnn_sdpa_repro dense-then-narrow | narrow-then-dense | narrow-only\n";
    return 2;
  }
  if (!torch::cuda::is_available()) {
    std::cerr << "strata_cudnn_sdpa_repro: no CUDA device\n";
    return 2;
  }
  const int64_t b = 1, n = 1536, h = 24, d = 128;
  at::manual_seed(7);
  const auto o = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  // q, k, v as a DiT block makes them: [B, N, H, Dh] seen as [B, H, N, Dh].
  const auto q = at::randn({b, n, h, d}, o).transpose(1, 2);
  const auto k = at::randn({b, n, h, d}, o).transpose(1, 2);
  const auto v = at::randn({b, n, h, d}, o).transpose(1, 2);
  const auto dense = at::randn({b, n, h, d}, o).transpose(1, 2);
  const auto narrow = at::randn({b, n, h * d + 512}, o).narrow(2, 0, h * d).view({b, n, h, d}).transpose(1, 2);
  auto gradFor = [&](const std::string& name) { return name == "dense" ? dense : narrow; };

  onlyKernel(false);
  std::vector<std::vector<at::Tensor>> reference;
  for (const auto& name : sequence) reference.push_back(backward(q, k, v, gradFor(name)));

  std::cout << "LibTorch " << TORCH_VERSION << ", q/k/v [" << b << ", " << h << ", " << n << ", " << d
            << "] bf16 with strides of [B, N, H, Dh]\n";
  onlyKernel(true);
  bool allRight = true;
  for (size_t i = 0; i < sequence.size(); ++i) {
    const auto& g = gradFor(sequence[i]);
    std::cout << "backward " << i + 1 << ", output gradient " << sequence[i] << " (strides " << g.strides()
              << "): " << std::flush;
    try {
      const double err = worstRelativeL2(backward(q, k, v, g), reference[i]);
      torch::cuda::synchronize();
      const bool right = err < 2e-2;
      allRight = allRight && right;
      std::cout << "dq/dk/dv relative L2 to flash " << err << (right ? " (right)" : " (WRONG)") << std::endl;
    } catch (const std::exception& e) {
      allRight = false;
      const std::string what = e.what();
      std::cout << "error: " << what.substr(0, what.find('\n')) << std::endl;
    }
  }
  return allRight ? 0 : 1;
}
