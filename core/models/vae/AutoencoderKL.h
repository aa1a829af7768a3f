#pragma once
// AutoencoderKL (diffusers AutoencoderKL, the VAE of FLUX.1 and SD, and
// AutoencoderKLFlux2, FLUX.2's: the same network plus a batch norm whose running
// statistics normalise the patchified latents): images in [-1, 1] -> latent mean
// / logvar, latents -> images, and the latents <-> the training latents. Modules
// are named by the diffusers state-dict keys, so named_parameters() equals a
// diffusers checkpoint's key set (vaeParamShapes; the batch norm's statistics are
// buffers, vaeBufferShapes) and loading is a lookup; the ldm names of
// ae.safetensors and flux2-vae.safetensors go through models/vae/VaeNames.h. The
// VAE is never trained here: its parameters do not require grad.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <utility>
#include <vector>

#include "models/vae/VaeConfig.h"
#include "nn/Linear.h"

namespace strata::vae {

// Where and in which dtype a model is built; parameters are created there directly.
struct VaeBuildOptions {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
};

// The dtype a VAE really runs in for a requested one: diffusers runs a
// force_upcast VAE in float32 when fp16 was asked for (SD-style VAEs overflow
// in fp16); bf16 and float32 are kept.
at::ScalarType vaeComputeDtype(const VaeConfig& cfg, at::ScalarType requested);

// Single-head attention softmax(q k^T / sqrt(C)) v for q, k, v [B, 1, N, C]
// through compat::scaledDotProductAttention, in query-row chunks so that no more
// than `maxScoreElements` scores exist at once whatever backend runs it (the
// mid block attends over every latent pixel: 65536 tokens at 2048 px).
constexpr int64_t kVaeMaxScoreElements = int64_t{1} << 28;  // 512 MiB of bf16; a 1024 px image in one piece
at::Tensor vaeAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        int64_t maxScoreElements = kVaeMaxScoreElements);

// 2-D convolution with "weight" [out, in, k, k] and "bias" [out] (torch.nn.Conv2d's init).
class VaeConv2dImpl : public torch::nn::Module {
 public:
  VaeConv2dImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  at::Tensor bias;

 private:
  int64_t stride_;
  int64_t padding_;
};
TORCH_MODULE(VaeConv2d);

// GroupNorm with affine "weight" / "bias" [C], eps 1e-6.
class VaeGroupNormImpl : public torch::nn::Module {
 public:
  VaeGroupNormImpl(int64_t groups, int64_t channels, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  at::Tensor bias;

 private:
  int64_t groups_;
};
TORCH_MODULE(VaeGroupNorm);

// diffusers ResnetBlock2D without a time embedding: norm1, SiLU, conv1, norm2,
// SiLU, conv2, plus the input (through a 1x1 conv_shortcut when the width changes).
class VaeResnetBlockImpl : public torch::nn::Module {
 public:
  VaeResnetBlockImpl(int64_t in, int64_t out, int64_t groups, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);
  VaeGroupNorm norm1{nullptr}, norm2{nullptr};
  VaeConv2d conv1{nullptr}, conv2{nullptr}, convShortcut{nullptr};  // convShortcut: null when in == out
};
TORCH_MODULE(VaeResnetBlock);

// The mid block's single-head self-attention over all pixels (diffusers
// Attention with group_norm, to_q/k/v, to_out.0, residual).
class VaeAttentionImpl : public torch::nn::Module {
 public:
  VaeAttentionImpl(int64_t channels, int64_t groups, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);
  VaeGroupNorm groupNorm{nullptr};
  nn::Linear toQ{nullptr}, toK{nullptr}, toV{nullptr}, toOut{nullptr};
};
TORCH_MODULE(VaeAttention);

// UNetMidBlock2D: resnet, attention (if enabled), resnet.
class VaeMidBlockImpl : public torch::nn::Module {
 public:
  VaeMidBlockImpl(int64_t channels, int64_t groups, bool attention, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);
  std::vector<VaeResnetBlock> resnets;
  VaeAttention attention{nullptr};  // null without mid_block_add_attention
};
TORCH_MODULE(VaeMidBlock);

// A level of the encoder (DownEncoderBlock2D) or the decoder (UpDecoderBlock2D):
// resnets, then a stride-2 conv after zero-padding right and bottom by one
// (diffusers' Downsample2D with padding 0) or a nearest 2x upsample and conv.
class VaeLevelImpl : public torch::nn::Module {
 public:
  enum class Resample { None, Down, Up };
  VaeLevelImpl(int64_t in, int64_t out, int64_t layers, int64_t groups, Resample resample,
               const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);
  std::vector<VaeResnetBlock> resnets;
  VaeConv2d resampleConv{nullptr};  // downsamplers.0.conv / upsamplers.0.conv; null at the last level

 private:
  Resample resample_;
};
TORCH_MODULE(VaeLevel);

// FLUX.2's latent normalisation: diffusers' BatchNorm2d(affine=False) as only its
// running statistics are used (eval mode): buffers "running_mean" and
// "running_var" [channels], kept in float32 whatever the model's dtype. The
// training counter num_batches_tracked is not kept (nothing reads it).
class VaeBatchNormImpl : public torch::nn::Module {
 public:
  VaeBatchNormImpl(int64_t channels, double eps, const at::Device& device);
  // x [B, channels, h, w] -> (x - mean) / sqrt(var + eps), computed in float32,
  // returned in x's dtype; unnormalize is its inverse.
  at::Tensor normalize(const at::Tensor& x) const;
  at::Tensor unnormalize(const at::Tensor& x) const;
  at::Tensor runningMean;
  at::Tensor runningVar;

 private:
  // mean and sqrt(var + eps) as [1, channels, 1, 1] float32 on `device`.
  std::pair<at::Tensor, at::Tensor> stats(const at::Tensor& x) const;
  double eps_;
};
TORCH_MODULE(VaeBatchNorm);

class VaeEncoderImpl : public torch::nn::Module {
 public:
  VaeEncoderImpl(const VaeConfig& cfg, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& image);  // [B, in, H, W] -> [B, 2 latent, H/f, W/f]
  VaeConv2d convIn{nullptr}, convOut{nullptr};
  std::vector<VaeLevel> downBlocks;
  VaeMidBlock midBlock{nullptr};
  VaeGroupNorm convNormOut{nullptr};
};
TORCH_MODULE(VaeEncoder);

class VaeDecoderImpl : public torch::nn::Module {
 public:
  VaeDecoderImpl(const VaeConfig& cfg, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& latents);  // [B, latent, h, w] -> [B, out, h f, w f]
  VaeConv2d convIn{nullptr}, convOut{nullptr};
  VaeMidBlock midBlock{nullptr};
  std::vector<VaeLevel> upBlocks;
  VaeGroupNorm convNormOut{nullptr};
};
TORCH_MODULE(VaeDecoder);

// The posterior of one encode: a diagonal Gaussian per latent pixel.
struct VaeLatentDist {
  at::Tensor mean;    // [B, latent, H/f, W/f]
  at::Tensor logvar;  // same shape, clamped to [-30, 20] as diffusers does
  // mean + exp(logvar / 2) * noise (what ai-toolkit caches); mean is the mode. A
  // generator must be of the latents' device (a CPU generator for CPU latents).
  at::Tensor sample(c10::optional<at::Generator> generator = c10::nullopt) const;
};

// Encoding in overlapping tiles bounds the activation memory of large images.
// Tiles are encoded on their own (GroupNorm statistics per tile, so the result
// is close to, not equal to, the whole-image encode) and blended linearly over
// the overlap, as diffusers' tiled_encode does.
struct VaeTiling {
  int64_t tileSize = 0;   // pixels per tile side (a multiple of the downscale factor); 0: no tiling
  double overlap = 0.25;  // fraction of a tile shared with its neighbour, in [0, 0.5]
};

class AutoencoderKL : public torch::nn::Module {
 public:
  explicit AutoencoderKL(const VaeConfig& cfg, const VaeBuildOptions& options = {});

  // image [B, in, H, W] in [-1, 1] (cast to the model's device and dtype).
  VaeLatentDist encode(const at::Tensor& image, const VaeTiling& tiling = {});
  // The encoder's moments [B, 2 latent, H/f, W/f] (after quant_conv), before the split.
  at::Tensor encodeMoments(const at::Tensor& image);
  // latents [B, latent, h, w] as encode gives them (not scaled) -> image [B, out, h f, w f].
  at::Tensor decode(const at::Tensor& latents);

  // What the diffusion model trains on (encode's mean, the posterior's mode, in),
  // and back. AutoencoderKL: (z - shift_factor) * scaling_factor, same shape.
  // AutoencoderKLFlux2: (patchify(z) - bn.running_mean) / sqrt(bn.running_var +
  // batch_norm_eps), [B, latent, h, w] -> [B, latent ph pw, h / ph, w / pw]
  // (Flux2Pipeline's _encode_vae_image); from: unnormalise, then unpatchify.
  at::Tensor toTrainingLatents(const at::Tensor& latents) const;
  at::Tensor fromTrainingLatents(const at::Tensor& trainingLatents) const;

  const VaeConfig& config() const { return cfg_; }
  at::ScalarType dtype() const;
  at::Device device() const;

  VaeEncoder encoder{nullptr};
  VaeDecoder decoder{nullptr};
  VaeConv2d quantConv{nullptr};      // quant_conv: SD-style VAEs only
  VaeConv2d postQuantConv{nullptr};  // post_quant_conv
  VaeBatchNorm bn{nullptr};          // bn: AutoencoderKLFlux2 only

 private:
  at::Tensor encodeTiled(const at::Tensor& image, const VaeTiling& tiling);
  VaeConfig cfg_;
};

}  // namespace strata::vae
