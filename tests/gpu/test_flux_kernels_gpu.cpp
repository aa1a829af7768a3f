// The DiT CUDA kernels (dit/DitKernels.h) against the ATen ops they
// replace, on fresh random inputs of several shapes (FLUX.1-dev's q at 1024 px among
// them, contiguous and as a narrow of a wider projection, as FLUX.2's single blocks
// take q and k): the fused RMSNorm + rotary forward equals FluxRmsNorm then
// applyRotary, and its input gradient is at least as close to a float64 reference as theirs.
#include <gtest/gtest.h>

#include <iostream>
#include <vector>

#include "common/TestSupport.h"
#include "models/flux/FluxConfig.h"
#include "dit/DitKernels.h"
#include "dit/DitLayers.h"
#include "dit/DitOps.h"
#include "models/flux/FluxTransformer.h"

using namespace strata;
using namespace strata::flux;
using namespace strata::dit;

namespace {

double relL2(const at::Tensor& a, const at::Tensor& ref) {
  const auto r = ref.to(at::kDouble);
  return ((a.to(at::kDouble) - r).norm() / r.norm().clamp_min(1e-30)).item<double>();
}

// The same function in float64 (x -> rotary(rmsnorm(x) * w)), for the gradient.
at::Tensor reference64(const at::Tensor& x, const at::Tensor& w, const at::Tensor& cos, const at::Tensor& sin) {
  const auto y = x * at::rsqrt(x.pow(2).mean(-1, true) + FluxConfig::kNormEps) * w;  // [B, N, H, Dh]
  const auto pairs = y.unflatten(-1, {y.size(-1) / 2, 2});
  const auto rotated = at::stack({-pairs.select(-1, 1), pairs.select(-1, 0)}, -1).flatten(-2);
  return y * cos.unsqueeze(0).unsqueeze(2) + rotated * sin.unsqueeze(0).unsqueeze(2);
}

}  // namespace

TEST(FluxKernelsGpu, FusedNormRopeEqualsTheAtenOpsForwardAndBackward) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  if (!ditCudaKernelsBuilt()) GTEST_SKIP() << "this build has no FLUX CUDA kernels (no CUDA compiler at configure)";
  const at::Device cuda(at::kCUDA, 0);
  // [B, N, H, Dh]: FLUX.1-dev's joint q at 1024 px, then odd sizes and the dim limits.
  const std::vector<std::vector<int64_t>> shapes = {{1, 4608, 24, 128}, {2, 77, 3, 64}, {1, 33, 2, 256}, {3, 5, 3, 2}};
  for (const auto& shape : shapes) {
    const int64_t n = shape[1];
    const int64_t dim = shape[3];
    const auto angles = at::rand({n, dim / 2}, at::TensorOptions().device(cuda)) * 50.0;  // [N, Dh/2]
    const auto cos = angles.cos().repeat_interleave(2, 1).contiguous();                   // [N, Dh]
    const auto sin = angles.sin().repeat_interleave(2, 1).contiguous();
    FluxBuildOptions o;
    o.device = cuda;
    o.dtype = at::kBFloat16;
    FluxRmsNorm norm(dim, o);
    {
      at::NoGradGuard noGrad;
      norm->weight.copy_(1 + 0.2 * at::randn({dim}, at::TensorOptions().device(cuda)));
    }
    norm->weight.requires_grad_(false);
    for (const bool narrowed : {false, true}) {
      // narrowed: x is the middle third of a [B, N, 3 H Dh + 2] projection (tokens 3 H Dh + 2 apart).
      const int64_t width = shape[2] * dim;
      const int64_t wide = narrowed ? 3 * width + 2 : width;
      const auto base = (at::randn({shape[0], n, wide}, at::TensorOptions().device(cuda)) * 3).to(at::kBFloat16);
      auto viewOf = [&](const at::Tensor& b) {
        return b.narrow(-1, narrowed ? width : 0, width).unflatten(-1, {shape[2], dim});  // [B, N, H, Dh]
      };
      const auto x = viewOf(base);
      ASSERT_EQ(x.is_contiguous(), !narrowed);
      ASSERT_TRUE(normRopeFits(x, norm->weight, cos, sin));

      const auto br = base.clone().requires_grad_(true);
      const auto ref = applyRotary(norm->forward(viewOf(br)), cos, sin);
      const auto bk = base.clone().requires_grad_(true);
      const auto out = normRope(viewOf(bk), norm->weight, cos, sin, FluxConfig::kNormEps);
      const auto g = at::randn(shape, at::TensorOptions().device(cuda)).to(at::kBFloat16);
      ref.backward(g);
      out.backward(g);

      const auto b64 = base.to(at::kDouble).requires_grad_(true);
      const auto o64 = reference64(viewOf(b64), norm->weight.to(at::kDouble), cos.to(at::kDouble), sin.to(at::kDouble));
      o64.backward(g.to(at::kDouble));

      const double bitEqual = out.eq(ref).to(at::kDouble).mean().item<double>();
      const double outErr = relL2(out, ref);
      const double gradVsAten = relL2(bk.grad(), br.grad());
      const double gradErrKernel = relL2(bk.grad(), b64.grad());
      const double gradErrAten = relL2(br.grad(), b64.grad());
      std::cout << "[flux kernels gpu] " << at::IntArrayRef(shape) << (narrowed ? " (narrowed)" : "")
                << ": out bit-equal " << 100 * bitEqual << "%, rel L2 " << outErr << "; grad x vs ATen " << gradVsAten
                << ", vs float64: kernel " << gradErrKernel << ", ATen " << gradErrAten << std::endl;
      EXPECT_FALSE(out.isnan().any().item<bool>());
      EXPECT_FALSE(bk.grad().isnan().any().item<bool>());
      // Same roundings as the ATen ops: equal but for the odd rstd ulp.
      EXPECT_GT(bitEqual, 0.999);
      EXPECT_LT(outErr, 1e-3);
      // The gradient differs only by rounding (bf16 has 8 mantissa bits); nothing outside x's part.
      EXPECT_LT(gradVsAten, 2e-2);
      // No worse than ATen's against float64, where there are enough elements for the error
      // to be a measure: on [3, 5, 3, 2]'s 90 values each error is a few roundings of random
      // data (s36: 0.0020 against ATen's 0.0022, s39: 0.0048 against 0.0029), so a small
      // tensor is held to bf16's rounding level instead.
      if (x.numel() >= 4096)
        EXPECT_LT(gradErrKernel, 1.2 * gradErrAten + 1e-4);
      else
        EXPECT_LT(gradErrKernel, 1e-2);
      if (narrowed) {
        EXPECT_TRUE(bk.grad().narrow(-1, 0, width).eq(0).all().item<bool>());
        EXPECT_TRUE(bk.grad().narrow(-1, 2 * width, wide - 2 * width).eq(0).all().item<bool>());
      }
    }
  }
}

TEST(FluxKernelsGpu, OnlyBf16FrozenInputsWithHeadsSideBySideTakeTheKernel) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  if (!ditCudaKernelsBuilt()) GTEST_SKIP() << "this build has no FLUX CUDA kernels (no CUDA compiler at configure)";
  const auto opt = at::TensorOptions().device(at::Device(at::kCUDA, 0));
  const auto x = at::randn({1, 8, 2, 16}, opt).to(at::kBFloat16);
  const auto w = at::ones({16}, opt).to(at::kBFloat16);
  const auto cs = at::ones({8, 16}, opt);
  EXPECT_TRUE(normRopeFits(x, w, cs, cs));
  EXPECT_FALSE(normRopeFits(x.to(at::kFloat), w, cs, cs));   // float32 model
  EXPECT_FALSE(normRopeFits(x.transpose(1, 2), w, cs, cs));  // heads apart
  const auto wide = at::randn({2, 9, 3 * 32 + 2}, opt).to(at::kBFloat16);
  // Two samples whose tokens are not evenly spaced (a 9-token buffer's first 8), then one sample's.
  EXPECT_FALSE(normRopeFits(wide.narrow(1, 0, 8).narrow(-1, 32, 32).unflatten(-1, {2, 16}), w, cs, cs));
  EXPECT_TRUE(normRopeFits(wide.narrow(0, 0, 1).narrow(1, 0, 8).narrow(-1, 32, 32).unflatten(-1, {2, 16}), w, cs, cs));
  const auto odd = at::randn({1, 8, 3 * 32 + 1}, opt).to(at::kBFloat16);
  EXPECT_FALSE(normRopeFits(odd.narrow(-1, 32, 32).unflatten(-1, {2, 16}), w, cs, cs));  // tokens an odd count apart
  EXPECT_FALSE(normRopeFits(x, w.clone().requires_grad_(true), cs, cs));                 // trainable norm weight
  EXPECT_FALSE(normRopeFits(x, w, cs.narrow(0, 0, 4), cs.narrow(0, 0, 4)));              // tables of other tokens
  EXPECT_FALSE(normRopeFits(x.cpu(), w.cpu(), cs.cpu(), cs.cpu()));
}

// dit::swiglu on CUDA bf16 runs the SwiGLU kernels: values and the input gradient as
// the ATen ops (silu then mul; their autograd) give them, for FLUX.2-sized MLPs,
// contiguous and as the MLP part of a single block's fused projection.
TEST(FluxKernelsGpu, SwigluKernelsEqualTheAtenOps) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  if (!ditCudaKernelsBuilt()) GTEST_SKIP() << "this build has no FLUX CUDA kernels (no CUDA compiler at configure)";
  const auto opt = at::TensorOptions().device(at::Device(at::kCUDA, 0));
  struct Case {
    std::vector<int64_t> shape;  // of the projection x is cut from
    int64_t offset, width;       // x = projection[..., offset : offset + width]
  };
  // FLUX.2 [klein] 9B at 1024 px: a double block's MLP input, a single block's fused projection.
  const std::vector<Case> cases = {{{1, 4096, 24576}, 0, 24576},
                                   {{1, 4608, 3 * 4096 + 24576}, 3 * 4096, 24576},
                                   {{2, 7, 8}, 0, 8},
                                   {{3, 5, 22}, 6, 12}};
  for (const auto& c : cases) {
    const auto base = (at::randn(c.shape, opt) * 4).to(at::kBFloat16);
    auto xOf = [&](const at::Tensor& b) { return b.narrow(-1, c.offset, c.width); };
    ASSERT_TRUE(swigluFits(xOf(base)));
    const auto bk = base.clone().requires_grad_(true);
    const auto out = dit::swiglu(xOf(bk));
    const auto br = base.clone().requires_grad_(true);
    const auto halves = xOf(br).chunk(2, -1);
    const auto ref = at::silu(halves[0]) * halves[1];
    const auto g = at::randn(ref.sizes(), opt).to(at::kBFloat16);
    out.backward(g);
    ref.backward(g);
    const double outEqual = out.eq(ref).to(at::kDouble).mean().item<double>();
    const double gradEqual = bk.grad().eq(br.grad()).to(at::kDouble).mean().item<double>();
    std::cout << "[flux kernels gpu] swiglu " << at::IntArrayRef(c.shape) << " [" << c.offset << ":+" << c.width
              << "]: out bit-equal " << 100 * outEqual << "%, grad bit-equal " << 100 * gradEqual << "%, grad rel L2 "
              << relL2(bk.grad(), br.grad()) << std::endl;
    EXPECT_TRUE(out.is_contiguous());
    EXPECT_GT(outEqual, 0.999);
    EXPECT_GT(gradEqual, 0.999);
    EXPECT_LT(relL2(bk.grad(), br.grad()), 1e-3);
  }
  const auto x = at::randn({2, 8}, opt).to(at::kBFloat16);
  EXPECT_TRUE(swigluFits(x));
  EXPECT_FALSE(swigluFits(x.to(at::kFloat)));                              // float32
  EXPECT_FALSE(swigluFits(at::randn({2, 6}, opt).to(at::kBFloat16)));      // halves of odd width
  EXPECT_FALSE(swigluFits(at::randn({8, 2}, opt).to(at::kBFloat16).t()));  // last dim strided
  EXPECT_FALSE(swigluFits(at::randn({2, 9, 8}, opt).to(at::kBFloat16).narrow(1, 0, 8).transpose(0, 1)));  // uneven rows
}

// dit::normModulate on CUDA bf16 runs the LayerNorm + modulation kernels: values and
// gradients as layerNorm then modulate (ATen's ops and their autograd) give them, for
// FLUX.1's image tokens at 1024 px (a narrow of the joined sequence), two samples whose
// tokens are a narrow of a longer buffer, FLUX.2-dev's width and the widest row, with
// shift and scale cut from one modulation vector as the blocks cut them; a trained
// modulation's gradients too.
TEST(FluxKernelsGpu, NormModulateKernelsEqualTheAtenOps) {
  STRATA_REQUIRE_CUDA_DEVICES(1);
  if (!ditCudaKernelsBuilt()) GTEST_SKIP() << "this build has no FLUX CUDA kernels (no CUDA compiler at configure)";
  const auto opt = at::TensorOptions().device(at::Device(at::kCUDA, 0));
  struct Case {
    std::vector<int64_t> buffer;  // [B, tokens in the buffer, D]
    int64_t offset, tokens;       // x = buffer[:, offset : offset + tokens]
    bool trainedModulation;
  };
  const std::vector<Case> cases = {{{1, 4608, 3072}, 512, 4096, false},
                                   {{2, 90, 64}, 13, 77, true},
                                   {{1, 33, 6144}, 0, 33, false},
                                   {{1, 3, 8192}, 0, 3, false},
                                   {{3, 5, 8}, 0, 5, true}};
  for (const auto& c : cases) {
    const int64_t batch = c.buffer[0];
    const int64_t dim = c.buffer[2];
    // A mean far from zero: the variance must not come from E[x^2] - E[x]^2.
    const auto base = (at::randn(c.buffer, opt) * 3 + 20).to(at::kBFloat16);
    const auto mod =
        at::cat({at::randn({batch, dim}, opt), at::randn({batch, dim}, opt) * 0.5, at::randn({batch, 4 * dim}, opt)},
                1)
            .to(at::kBFloat16);  // [B, 6D]: shift, scale, the rest
    auto run = [&](bool fused, at::Tensor& b, at::Tensor& m) {
      b = base.clone().requires_grad_(true);
      m = mod.clone().requires_grad_(c.trainedModulation);
      const auto x = b.narrow(1, c.offset, c.tokens);
      const auto parts = m.chunk(6, 1);
      if (fused) {
        EXPECT_TRUE(normModulateFits(x, parts[0], parts[1]));
        return normModulateCuda(x, parts[0], parts[1], dit::kNormEps);
      }
      return dit::modulate(dit::layerNorm(x, dit::kNormEps), parts[0], parts[1]);
    };
    at::Tensor bk, mk, br, mr;
    const auto out = run(true, bk, mk);
    const auto ref = run(false, br, mr);
    const auto g = at::randn(ref.sizes(), opt).to(at::kBFloat16);
    out.backward(g);
    ref.backward(g);

    const auto b64 = base.to(at::kDouble).requires_grad_(true);
    {
      const auto x = b64.narrow(1, c.offset, c.tokens);
      const auto parts = mod.to(at::kDouble).chunk(6, 1);
      const auto o64 =
          at::layer_norm(x, {dim}, {}, {}, dit::kNormEps) * (1 + parts[1].unsqueeze(1)) + parts[0].unsqueeze(1);
      o64.backward(g.to(at::kDouble));
    }
    const double outEqual = out.eq(ref).to(at::kDouble).mean().item<double>();
    const double gradVsAten = relL2(bk.grad(), br.grad());
    const double gradErrKernel = relL2(bk.grad(), b64.grad());
    const double gradErrAten = relL2(br.grad(), b64.grad());
    std::cout << "[flux kernels gpu] normModulate " << at::IntArrayRef(c.buffer) << " [:, " << c.offset << ":+"
              << c.tokens << "]: out bit-equal " << 100 * outEqual << "%, rel L2 " << relL2(out, ref)
              << "; grad x vs ATen " << gradVsAten << ", vs float64: kernel " << gradErrKernel << ", ATen "
              << gradErrAten << std::endl;
    EXPECT_TRUE(out.is_contiguous());
    EXPECT_FALSE(bk.grad().isnan().any().item<bool>());
    // ATen's mean and variance are Welford's, the kernel's two passes: the odd rstd ulp
    // moves a normalised value across a bf16 rounding now and then.
    EXPECT_GT(outEqual, 0.995);
    EXPECT_LT(relL2(out, ref), 2e-3);
    EXPECT_LT(gradVsAten, 2e-2);
    if (c.tokens * dim >= 4096)
      EXPECT_LT(gradErrKernel, 1.2 * gradErrAten + 1e-4);
    else
      EXPECT_LT(gradErrKernel, 2e-2);
    // Nothing outside x's tokens.
    EXPECT_TRUE(bk.grad().narrow(1, 0, c.offset).eq(0).all().item<bool>());
    if (c.trainedModulation) {
      const double modVsAten = relL2(mk.grad(), mr.grad());
      std::cout << "[flux kernels gpu]   trained modulation: shift and scale gradients vs ATen " << modVsAten
                << std::endl;
      EXPECT_LT(modVsAten, 2e-2);
      EXPECT_TRUE(mk.grad().narrow(1, 2 * dim, 4 * dim).eq(0).all().item<bool>());
    }
  }
  const auto x = at::randn({2, 8, 16}, opt).to(at::kBFloat16);
  const auto m = at::randn({2, 32}, opt).to(at::kBFloat16).chunk(2, 1);
  EXPECT_TRUE(normModulateFits(x, m[0], m[1]));
  EXPECT_FALSE(normModulateFits(x.to(at::kFloat), m[0], m[1]));                                // float32 model
  EXPECT_FALSE(normModulateFits(x.transpose(1, 2).contiguous().transpose(1, 2), m[0], m[1]));  // last dim strided
  const auto m12 = at::randn({2, 24}, opt).to(at::kBFloat16).chunk(2, 1);
  EXPECT_FALSE(normModulateFits(at::randn({2, 8, 12}, opt).to(at::kBFloat16), m12[0], m12[1]));  // not whole vectors
  // Rows 8 bytes off a 16-byte boundary.
  EXPECT_FALSE(normModulateFits(at::randn({2, 9, 16}, opt).to(at::kBFloat16).narrow(2, 4, 8),
                                at::randn({2, 8}, opt).to(at::kBFloat16), m[1].narrow(1, 0, 8)));
  const auto wideMod = at::randn({1, 2 * 8200}, opt).to(at::kBFloat16).chunk(2, 1);
  EXPECT_FALSE(normModulateFits(at::randn({1, 2, 8200}, opt).to(at::kBFloat16), wideMod[0], wideMod[1]));  // too wide
  EXPECT_FALSE(normModulateFits(x, m[0].narrow(0, 0, 1), m[1]));  // another batch
  EXPECT_FALSE(normModulateFits(x.cpu(), m[0].cpu(), m[1].cpu()));
}
