// GPU checks of nn/QuantKernels (label gpu; they skip without CUDA, on a build
// without the kernels or without float8): each CUDA kernel against the ATen ops it
// replaces (nn::setFusedPaths(false)), bit for bit, at FLUX.1-dev shapes and at
// shapes that are not multiples of the kernels' tiles, and timed against them.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "common/TestSupport.h"
#include "common/TorchCompat.h"
#include "gpu/GpuStats.h"
#include "nn/Linear.h"
#include "nn/QuantKernels.h"
#include "nn/Quantize.h"

using namespace strata;
using namespace strata::test::gpu;

namespace {

const at::Device kCuda(at::kCUDA, 0);

#define STRATA_REQUIRE_QUANT_KERNELS()                                                               \
  STRATA_REQUIRE_CUDA_DEVICES(1);                                                                    \
  if (!nn::quantKernelsBuilt()) GTEST_SKIP() << "this build has no CUDA kernels (no CUDA compiler)"; \
  if (!compat::kHasFloat8) GTEST_SKIP() << "this LibTorch has no float8 dtypes";

// The ATen path's result of `f` and the kernel's, the kernel's time and ATen's (ms, median of
// 20), and whether the kernel call took a kernel (not a silent fallback to the ATen ops).
template <class F>
auto bothPaths(F&& f) {
  struct Result {
    decltype(f()) aten, kernel;
    double atenMs = 0, kernelMs = 0;
    bool kernelRan = false;
  } r;
  auto timed = [&](double* ms) {
    f();
    synchronize();
    std::vector<double> t;
    for (int i = 0; i < 20; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      synchronize();
      t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    *ms = medianMs(t);
  };
  nn::setFusedPaths(false);
  r.aten = f();
  timed(&r.atenMs);
  nn::setFusedPaths(true);
  const int64_t before = nn::quantKernelLaunches();
  r.kernel = f();
  r.kernelRan = nn::quantKernelLaunches() > before;
  timed(&r.kernelMs);
  return r;
}

bool sameBytes(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         at::equal(a.contiguous().view(at::kByte), b.contiguous().view(at::kByte));
}

}  // namespace

TEST(QuantKernelsGpu, RowQuantizationEqualsTheAtenOps) {
  STRATA_REQUIRE_QUANT_KERNELS();
  struct Shape {
    int64_t rows, cols;
  };
  // 1024 px single block input (4608 tokens x 3072), its proj_out input (15360), the
  // image stream's mlp out input (12288), the single block's fused projection gradient
  // (21504), a row longer than the register-resident kernels take (the two-pass one),
  // a row count that is no multiple of anything.
  for (const auto& s :
       std::vector<Shape>{{4608, 3072}, {4608, 15360}, {4096, 12288}, {64, 21504}, {3, 32768}, {77, 136}, {1, 8}}) {
    for (const bool withColumnScale : {false, true}) {
      at::manual_seed(s.rows + s.cols);
      const auto x = (at::randn({s.rows, s.cols}, at::TensorOptions(kCuda)) * 3).to(at::kBFloat16);
      // A zero row (scale from the clamp) and a row with one large value.
      x[0].zero_();
      if (s.rows > 1) x[1][s.cols - 1] = 900.0;
      const auto colScale =
          withColumnScale ? at::rand({s.cols}, at::TensorOptions(kCuda)) * 0.01 + 1e-4 : at::Tensor();  // [cols]
      const auto r = bothPaths([&] { return nn::quantizeRowsE4m3(x, colScale, 440.0); });
      const std::string what =
          std::to_string(s.rows) + "x" + std::to_string(s.cols) + (withColumnScale ? " with column scale" : "");
      EXPECT_TRUE(r.kernelRan) << what << ": the kernel did not run";
      EXPECT_TRUE(sameBytes(r.kernel.data, r.aten.data)) << what << ": e4m3 data differ";
      EXPECT_TRUE(sameBytes(r.kernel.scale, r.aten.scale)) << what << ": row scales differ";
      EXPECT_FALSE(at::isnan(r.kernel.data.to(at::kFloat)).any().item<bool>()) << what;
      std::cout << "[quant kernels gpu] quantize rows " << what << ": kernel " << r.kernelMs << " ms, ATen " << r.atenMs
                << " ms" << std::endl;
    }
  }
}

TEST(QuantKernelsGpu, WeightTransposeAndDequantizationEqualTheAtenOps) {
  STRATA_REQUIRE_QUANT_KERNELS();
  struct Shape {
    int64_t rows, cols;
  };
  // FLUX.1-dev's fused single-block projection [21504, 3072], its proj_out [3072, 15360],
  // a shape whose dims are multiples of 4 but not of the 64-byte tile.
  for (const auto& s : std::vector<Shape>{{21504, 3072}, {3072, 15360}, {132, 68}}) {
    at::manual_seed(s.rows);
    const auto w = at::randn({s.rows, s.cols}, at::TensorOptions(kCuda).dtype(at::kBFloat16));
    for (const auto t : {nn::QuantType::QFloat8, nn::QuantType::Float8E4m3, nn::QuantType::Int8}) {
      const auto q = nn::quantizeWeight(w, t);
      const std::string what =
          std::string(nn::quantTypeName(t)) + " [" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + "]";
      const auto tr = bothPaths([&] { return nn::transposedCopy(q.data); });
      EXPECT_TRUE(tr.kernelRan) << what << ": the transpose kernel did not run";
      EXPECT_TRUE(sameBytes(tr.kernel, tr.aten)) << what << ": transposes differ";
      EXPECT_TRUE(sameBytes(tr.kernel, q.data.t().contiguous())) << what << ": not the transpose";
      const auto dq = bothPaths([&] { return nn::dequantizeRows(q.data, q.scale, at::kBFloat16); });
      EXPECT_TRUE(dq.kernelRan) << what << ": the dequantize kernel did not run";
      EXPECT_TRUE(sameBytes(dq.kernel, dq.aten)) << what << ": dequantized weights differ";
      std::cout << "[quant kernels gpu] " << what << ": transpose kernel " << tr.kernelMs << " ms (ATen " << tr.atenMs
                << "), dequantize kernel " << dq.kernelMs << " ms (ATen " << dq.atenMs << ")" << std::endl;
    }
  }
}
