#include "models/vae/AutoencoderKL.h"

#include <torch/autograd.h>
#include <torch/nn/init.h>

#include <algorithm>
#include <cmath>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "common/TorchCompat.h"
#include "dit/LatentPatch.h"

namespace strata::vae {

namespace {

constexpr double kEps = VaeConfig::kNormEps;
// Nearest-neighbour 2x upsampling, exact in every dtype: [B, C, H, W] -> [B, C, 2H, 2W].
at::Tensor upsampleNearest2x(const at::Tensor& x) {
  const auto b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  return x.view({b, c, h, 1, w, 1}).expand({b, c, h, 2, w, 2}).reshape({b, c, 2 * h, 2 * w});
}

// Blend weights along one side of a tile: 1 inside, a linear ramp over the
// `blend` pixels next to an edge that a neighbouring tile also covers.
at::Tensor edgeRamp(int64_t n, int64_t blend, bool rampStart, bool rampEnd, const at::TensorOptions& options) {
  std::vector<float> w(static_cast<size_t>(n), 1.0f);
  for (int64_t k = 0; k < std::min(blend, n); ++k) {
    const float r = static_cast<float>(k + 1) / static_cast<float>(blend + 1);
    if (rampStart) w[k] = std::min(w[k], r);
    if (rampEnd) w[n - 1 - k] = std::min(w[n - 1 - k], r);
  }
  return at::tensor(w, at::TensorOptions().dtype(at::kFloat)).to(options.device());
}

// Tile starts along one latent side: a fixed stride, the last tile flush with the end.
std::vector<int64_t> tileStarts(int64_t size, int64_t tile, int64_t stride) {
  std::vector<int64_t> starts;
  for (int64_t s = 0;; s += stride) {
    if (s + tile >= size) {
      const int64_t last = std::max<int64_t>(0, size - tile);
      if (starts.empty() || starts.back() != last) starts.push_back(last);
      return starts;
    }
    starts.push_back(s);
  }
}

// SiLU in place on a fresh norm output (one activation less at 1024 px); GroupNorm's
// backward needs its input, not its output, so this is safe under autograd too.
at::Tensor siluInPlace(at::Tensor x) {
  at::silu_(x);
  return x;
}

at::TensorOptions optionsOf(const VaeBuildOptions& o) { return at::TensorOptions().device(o.device).dtype(o.dtype); }

}  // namespace

at::Tensor vaeAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t maxScoreElements) {
  // q, k, v: [B, 1, N, C]; a 1024 px image (128 x 128 latent pixels) has 2^28 scores.
  const int64_t batch = q.size(0);
  const int64_t n = q.size(2);
  const int64_t rows = std::max<int64_t>(1, maxScoreElements / std::max<int64_t>(1, batch * k.size(2)));
  if (rows >= n) return compat::scaledDotProductAttention(q, k, v);
  std::vector<at::Tensor> parts;
  for (int64_t start = 0; start < n; start += rows)
    parts.push_back(compat::scaledDotProductAttention(q.narrow(2, start, std::min(rows, n - start)), k, v));
  return at::cat(parts, 2);  // [B, 1, N, C]
}

at::ScalarType vaeComputeDtype(const VaeConfig& cfg, at::ScalarType requested) {
  return requested == at::kHalf && cfg.forceUpcast ? at::kFloat : requested;
}

// ---- layers ----------------------------------------------------------------------

VaeConv2dImpl::VaeConv2dImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                             const at::TensorOptions& options)
    : stride_(stride), padding_(padding) {
  at::NoGradGuard noGrad;
  weight = register_parameter("weight", at::empty({out, in, kernel, kernel}, options), /*requires_grad=*/false);
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));  // torch.nn.Conv2d's init
  const double bound = 1.0 / std::sqrt(static_cast<double>(in * kernel * kernel));
  bias = register_parameter("bias", at::empty({out}, options).uniform_(-bound, bound), /*requires_grad=*/false);
}

at::Tensor VaeConv2dImpl::forward(const at::Tensor& x) {
  return at::conv2d(x, weight, bias, {stride_, stride_}, {padding_, padding_});
}

VaeGroupNormImpl::VaeGroupNormImpl(int64_t groups, int64_t channels, const at::TensorOptions& options)
    : groups_(groups) {
  weight = register_parameter("weight", at::ones({channels}, options), /*requires_grad=*/false);
  bias = register_parameter("bias", at::zeros({channels}, options), /*requires_grad=*/false);
}

at::Tensor VaeGroupNormImpl::forward(const at::Tensor& x) { return at::group_norm(x, groups_, weight, bias, kEps); }

VaeResnetBlockImpl::VaeResnetBlockImpl(int64_t in, int64_t out, int64_t groups, const at::TensorOptions& options) {
  norm1 = register_module("norm1", VaeGroupNorm(groups, in, options));
  conv1 = register_module("conv1", VaeConv2d(in, out, 3, 1, 1, options));
  norm2 = register_module("norm2", VaeGroupNorm(groups, out, options));
  conv2 = register_module("conv2", VaeConv2d(out, out, 3, 1, 1, options));
  if (in != out) convShortcut = register_module("conv_shortcut", VaeConv2d(in, out, 1, 1, 0, options));
}

at::Tensor VaeResnetBlockImpl::forward(const at::Tensor& x) {
  auto h = conv1->forward(siluInPlace(norm1->forward(x)));
  h = conv2->forward(siluInPlace(norm2->forward(h)));
  // In place on the fresh conv output (a conv's backward needs its input, not its output).
  return h.add_(convShortcut ? convShortcut->forward(x) : x);
}

VaeAttentionImpl::VaeAttentionImpl(int64_t channels, int64_t groups, const at::TensorOptions& options) {
  groupNorm = register_module("group_norm", VaeGroupNorm(groups, channels, options));
  toQ = register_module("to_q", nn::Linear(channels, channels, true, options));
  toK = register_module("to_k", nn::Linear(channels, channels, true, options));
  toV = register_module("to_v", nn::Linear(channels, channels, true, options));
  toOut = nn::Linear(channels, channels, true, options);
  auto out = register_module("to_out", torch::nn::ModuleList());
  out->push_back(toOut);  // to_out.0 (diffusers' to_out.1 is a dropout without parameters)
}

at::Tensor VaeAttentionImpl::forward(const at::Tensor& x) {
  const auto b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const auto tokens = groupNorm->forward(x).flatten(2).transpose(1, 2);  // [B, HW, C]
  const auto q = toQ->forward(tokens).unsqueeze(1);                      // [B, 1, HW, C]: one head
  const auto k = toK->forward(tokens).unsqueeze(1);
  const auto v = toV->forward(tokens).unsqueeze(1);
  const auto attended = vaeAttention(q, k, v).squeeze(1);                     // [B, HW, C]
  auto out = toOut->forward(attended).transpose(1, 2).reshape({b, c, h, w});  // [B, C, H, W]
  return out.add_(x);
}

VaeMidBlockImpl::VaeMidBlockImpl(int64_t channels, int64_t groups, bool withAttention,
                                 const at::TensorOptions& options) {
  auto list = register_module("resnets", torch::nn::ModuleList());
  for (int i = 0; i < 2; ++i) {
    resnets.push_back(VaeResnetBlock(channels, channels, groups, options));
    list->push_back(resnets.back());
  }
  if (withAttention) {
    attention = VaeAttention(channels, groups, options);
    register_module("attentions", torch::nn::ModuleList())->push_back(attention);
  }
}

at::Tensor VaeMidBlockImpl::forward(const at::Tensor& x) {
  auto h = resnets[0]->forward(x);
  if (attention) h = attention->forward(h);
  return resnets[1]->forward(h);
}

VaeLevelImpl::VaeLevelImpl(int64_t in, int64_t out, int64_t layers, int64_t groups, Resample resample,
                           const at::TensorOptions& options)
    : resample_(resample) {
  auto list = register_module("resnets", torch::nn::ModuleList());
  for (int64_t j = 0; j < layers; ++j) {
    resnets.push_back(VaeResnetBlock(j == 0 ? in : out, out, groups, options));
    list->push_back(resnets.back());
  }
  if (resample == Resample::None) return;
  const bool down = resample == Resample::Down;
  resampleConv = VaeConv2d(out, out, 3, down ? 2 : 1, down ? 0 : 1, options);
  auto holder = std::make_shared<torch::nn::Module>();  // downsamplers.0 / upsamplers.0
  holder->register_module("conv", resampleConv);
  register_module(down ? "downsamplers" : "upsamplers", torch::nn::ModuleList())->push_back(holder);
}

at::Tensor VaeLevelImpl::forward(const at::Tensor& x) {
  auto h = x;
  for (auto& r : resnets) h = r->forward(h);
  if (resample_ == Resample::Down) return resampleConv->forward(at::constant_pad_nd(h, {0, 1, 0, 1}, 0));
  if (resample_ == Resample::Up) return resampleConv->forward(upsampleNearest2x(h));
  return h;
}

VaeBatchNormImpl::VaeBatchNormImpl(int64_t channels, double eps, const at::Device& device) : eps_(eps) {
  const auto o = at::TensorOptions().device(device).dtype(at::kFloat);
  runningMean = register_buffer("running_mean", at::zeros({channels}, o));  // torch.nn.BatchNorm2d's initial stats
  runningVar = register_buffer("running_var", at::ones({channels}, o));
}

std::pair<at::Tensor, at::Tensor> VaeBatchNormImpl::stats(const at::Tensor& x) const {
  const int64_t c = runningMean.size(0);
  if (x.dim() != 4 || x.size(1) != c)
    throw Error("VAE batch norm: expected latents [B, " + std::to_string(c) + ", h, w], got " + shapeText(x.sizes()));
  const auto mean = runningMean.to(x.device()).view({1, c, 1, 1});
  const auto deviation = at::sqrt(runningVar.to(x.device()) + eps_).view({1, c, 1, 1});
  return {mean, deviation};
}

at::Tensor VaeBatchNormImpl::normalize(const at::Tensor& x) const {
  const auto [mean, deviation] = stats(x);
  return ((x.to(at::kFloat) - mean) / deviation).to(x.scalar_type());
}

at::Tensor VaeBatchNormImpl::unnormalize(const at::Tensor& x) const {
  const auto [mean, deviation] = stats(x);
  return (x.to(at::kFloat) * deviation + mean).to(x.scalar_type());
}

VaeEncoderImpl::VaeEncoderImpl(const VaeConfig& cfg, const at::TensorOptions& options) {
  const auto& b = cfg.blockOutChannels;
  const int64_t n = cfg.numBlocks();
  convIn = register_module("conv_in", VaeConv2d(cfg.inChannels, b[0], 3, 1, 1, options));
  auto list = register_module("down_blocks", torch::nn::ModuleList());
  int64_t out = b[0];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t in = out;
    out = b[i];
    const auto resample = i + 1 < n ? VaeLevelImpl::Resample::Down : VaeLevelImpl::Resample::None;
    downBlocks.push_back(VaeLevel(in, out, cfg.layersPerBlock, cfg.normNumGroups, resample, options));
    list->push_back(downBlocks.back());
  }
  midBlock = register_module("mid_block", VaeMidBlock(b.back(), cfg.normNumGroups, cfg.midBlockAddAttention, options));
  convNormOut = register_module("conv_norm_out", VaeGroupNorm(cfg.normNumGroups, b.back(), options));
  convOut = register_module("conv_out", VaeConv2d(b.back(), 2 * cfg.latentChannels, 3, 1, 1, options));
}

at::Tensor VaeEncoderImpl::forward(const at::Tensor& image) {
  auto h = convIn->forward(image);                       // [B, C0, H, W]
  for (auto& level : downBlocks) h = level->forward(h);  // halves H, W at every level but the last
  h = midBlock->forward(h);
  return convOut->forward(siluInPlace(convNormOut->forward(h)));  // [B, 2 latent, H/f, W/f]
}

VaeDecoderImpl::VaeDecoderImpl(const VaeConfig& cfg, const at::TensorOptions& options) {
  const auto& b = cfg.decoderChannels();
  const int64_t n = cfg.numBlocks();
  convIn = register_module("conv_in", VaeConv2d(cfg.latentChannels, b.back(), 3, 1, 1, options));
  midBlock = register_module("mid_block", VaeMidBlock(b.back(), cfg.normNumGroups, cfg.midBlockAddAttention, options));
  auto list = register_module("up_blocks", torch::nn::ModuleList());
  int64_t out = b.back();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t in = out;
    out = b[n - 1 - i];
    const auto resample = i + 1 < n ? VaeLevelImpl::Resample::Up : VaeLevelImpl::Resample::None;
    upBlocks.push_back(VaeLevel(in, out, cfg.layersPerBlock + 1, cfg.normNumGroups, resample, options));
    list->push_back(upBlocks.back());
  }
  convNormOut = register_module("conv_norm_out", VaeGroupNorm(cfg.normNumGroups, b[0], options));
  convOut = register_module("conv_out", VaeConv2d(b[0], cfg.outChannels, 3, 1, 1, options));
}

at::Tensor VaeDecoderImpl::forward(const at::Tensor& latents) {
  auto h = midBlock->forward(convIn->forward(latents));           // [B, C_top, h, w]
  for (auto& level : upBlocks) h = level->forward(h);             // doubles h, w at every level but the last
  return convOut->forward(siluInPlace(convNormOut->forward(h)));  // [B, out, h f, w f]
}

// ---- the autoencoder ---------------------------------------------------------------

at::Tensor VaeLatentDist::sample(c10::optional<at::Generator> generator) const {
  const auto noise = at::randn(mean.sizes(), generator, mean.options());
  return mean + at::exp(0.5 * logvar) * noise;
}

AutoencoderKL::AutoencoderKL(const VaeConfig& cfg, const VaeBuildOptions& options) : cfg_(cfg) {
  cfg_.validate();
  const auto o = optionsOf(options);
  encoder = register_module("encoder", VaeEncoder(cfg_, o));
  decoder = register_module("decoder", VaeDecoder(cfg_, o));
  const int64_t z = cfg_.latentChannels;
  if (cfg_.useQuantConv) quantConv = register_module("quant_conv", VaeConv2d(2 * z, 2 * z, 1, 1, 0, o));
  if (cfg_.usePostQuantConv) postQuantConv = register_module("post_quant_conv", VaeConv2d(z, z, 1, 1, 0, o));
  if (cfg_.batchNormLatents())
    bn = register_module("bn", VaeBatchNorm(cfg_.batchNormChannels(), cfg_.batchNormEps, options.device));
  for (auto& p : parameters()) p.requires_grad_(false);  // nn::Linear's parameters too
}

at::ScalarType AutoencoderKL::dtype() const { return encoder->convIn->weight.scalar_type(); }

at::Device AutoencoderKL::device() const { return encoder->convIn->weight.device(); }

at::Tensor AutoencoderKL::encodeMoments(const at::Tensor& image) {
  if (image.dim() != 4 || image.size(1) != cfg_.inChannels)
    throw Error("AutoencoderKL::encode: expected an image [B, " + std::to_string(cfg_.inChannels) + ", H, W], got " +
                shapeText(image.sizes()));
  auto moments = encoder->forward(image.to(device(), dtype()));  // [B, 2 latent, H/f, W/f]
  return quantConv ? quantConv->forward(moments) : moments;
}

VaeLatentDist AutoencoderKL::encode(const at::Tensor& image, const VaeTiling& tiling) {
  const bool tiled =
      tiling.tileSize > 0 && image.dim() == 4 && (image.size(2) > tiling.tileSize || image.size(3) > tiling.tileSize);
  const auto moments = tiled ? encodeTiled(image, tiling) : encodeMoments(image);
  const auto halves = moments.chunk(2, 1);  // mean, logvar: [B, latent, H/f, W/f]
  return {halves[0], halves[1].clamp(VaeConfig::kLogvarMin, VaeConfig::kLogvarMax)};
}

at::Tensor AutoencoderKL::encodeTiled(const at::Tensor& image, const VaeTiling& tiling) {
  const int64_t f = cfg_.downscaleFactor();
  const int64_t height = image.size(2), width = image.size(3);
  if (tiling.tileSize % f != 0)
    throw Error("AutoencoderKL: tile size " + std::to_string(tiling.tileSize) + " is not a multiple of " +
                std::to_string(f));
  if (!(tiling.overlap >= 0.0 && tiling.overlap <= 0.5))
    throw Error("AutoencoderKL: tile overlap " + std::to_string(tiling.overlap) + " is outside [0, 0.5]");
  if (height % f != 0 || width % f != 0)
    throw Error("AutoencoderKL: a tiled encode needs sides that are multiples of " + std::to_string(f) + ", got " +
                std::to_string(height) + "x" + std::to_string(width));
  const int64_t tile = tiling.tileSize / f;  // in latent pixels
  const int64_t blend = static_cast<int64_t>(std::floor(tile * tiling.overlap));
  const int64_t stride = std::max<int64_t>(1, tile - blend);
  const int64_t h = height / f, w = width / f;

  const auto fopts = at::TensorOptions().device(device()).dtype(at::kFloat);
  auto sum = at::zeros({image.size(0), 2 * cfg_.latentChannels, h, w}, fopts);  // weighted moments
  auto weights = at::zeros({1, 1, h, w}, fopts);
  for (const int64_t y : tileStarts(h, tile, stride)) {
    const int64_t th = std::min(tile, h - y);
    const auto wy = edgeRamp(th, blend, y > 0, y + th < h, fopts).view({1, 1, th, 1});
    for (const int64_t x : tileStarts(w, tile, stride)) {
      const int64_t tw = std::min(tile, w - x);
      const auto wx = edgeRamp(tw, blend, x > 0, x + tw < w, fopts).view({1, 1, 1, tw});
      const auto piece = image.narrow(2, y * f, th * f).narrow(3, x * f, tw * f);
      const auto m = encodeMoments(piece).to(at::kFloat);  // [B, 2 latent, th, tw]
      const auto wgt = wy * wx;                            // [1, 1, th, tw]
      sum.narrow(2, y, th).narrow(3, x, tw).add_(m * wgt);
      weights.narrow(2, y, th).narrow(3, x, tw).add_(wgt);
    }
  }
  return (sum / weights).to(dtype());
}

at::Tensor AutoencoderKL::decode(const at::Tensor& latents) {
  if (latents.dim() != 4 || latents.size(1) != cfg_.latentChannels)
    throw Error("AutoencoderKL::decode: expected latents [B, " + std::to_string(cfg_.latentChannels) + ", h, w], got " +
                shapeText(latents.sizes()));
  auto z = latents.to(device(), dtype());
  if (postQuantConv) z = postQuantConv->forward(z);
  return decoder->forward(z);
}

at::Tensor AutoencoderKL::toTrainingLatents(const at::Tensor& latents) const {
  if (!bn) return (latents - cfg_.shiftFactor) * cfg_.scalingFactor;
  if (latents.dim() != 4 || latents.size(1) != cfg_.latentChannels)
    throw Error("AutoencoderKL::toTrainingLatents: expected latents [B, " + std::to_string(cfg_.latentChannels) +
                ", h, w], got " + shapeText(latents.sizes()));
  const auto& p = cfg_.patchSize;
  return bn->normalize(dit::patchifyLatents(latents, p[0], p[1]));  // [B, latent ph pw, h/ph, w/pw]
}

at::Tensor AutoencoderKL::fromTrainingLatents(const at::Tensor& trainingLatents) const {
  if (!bn) return trainingLatents / cfg_.scalingFactor + cfg_.shiftFactor;
  const auto& p = cfg_.patchSize;
  return dit::unpatchifyLatents(bn->unnormalize(trainingLatents), p[0], p[1]);  // [B, latent, h ph, w pw]
}

}  // namespace strata::vae
