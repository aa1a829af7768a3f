#pragma once
// VaeConfig: the shape of an AutoencoderKL (diffusers AutoencoderKL with
// DownEncoderBlock2D / UpDecoderBlock2D blocks, as FLUX.1 and SD use it) or of
// FLUX.2's AutoencoderKLFlux2 (the same network with quant convs, an optional
// narrower decoder, and a batch norm's running statistics over the 2x2-patchified
// latents as the latent normalisation). Comes from a diffusers vae/config.json,
// from tensor shapes (diffusers or ldm names, header only) or from a preset.
// vaeParamShapes() lists every parameter the config implies, so shapes -> config
// -> shapes round-trips without a model.
#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::vae {

// The diffusers class, which decides the latent normalisation: AutoencoderKL's
// (z - shift_factor) * scaling_factor, or AutoencoderKLFlux2's
// (patchify(z) - bn.running_mean) / sqrt(bn.running_var + batch_norm_eps).
enum class VaeClass { AutoencoderKL, AutoencoderKLFlux2 };
const char* toString(VaeClass cls);  // the diffusers _class_name

struct VaeConfig {
  VaeClass cls = VaeClass::AutoencoderKL;                     // _class_name
  int64_t inChannels = 3;                                     // in_channels (image)
  int64_t outChannels = 3;                                    // out_channels (image)
  std::vector<int64_t> blockOutChannels{128, 256, 512, 512};  // block_out_channels, one per level
  int64_t layersPerBlock = 2;                                 // layers_per_block (decoder: one more per level)
  int64_t latentChannels = 16;                                // latent_channels
  int64_t normNumGroups = 32;                                 // norm_num_groups (GroupNorm everywhere)
  int64_t sampleSize = 1024;                                  // sample_size (diffusers' default tile size)
  double scalingFactor = 0.3611;                              // scaling_factor
  double shiftFactor = 0.1159;                                // shift_factor (diffusers: null = 0)
  bool useQuantConv = false;                                  // use_quant_conv (SD: true, FLUX.1: false)
  bool usePostQuantConv = false;                              // use_post_quant_conv
  bool midBlockAddAttention = true;                           // mid_block_add_attention
  bool forceUpcast = true;                                    // force_upcast: fp16 is run in float32
  // AutoencoderKLFlux2 only (AutoencoderKL leaves them as they are):
  std::vector<int64_t> decoderBlockOutChannels;  // decoder_block_out_channels; empty (null): blockOutChannels
  std::array<int64_t, 2> patchSize{2, 2};        // patch_size (rows, cols) of the patchify before the batch norm
  double batchNormEps = 1e-4;                    // batch_norm_eps
  double batchNormMomentum = 0.1;                // batch_norm_momentum (training only; kept for the round trip)

  static constexpr double kNormEps = 1e-6;     // GroupNorm eps in every block
  static constexpr double kLogvarMin = -30.0;  // DiagonalGaussianDistribution clamps logvar
  static constexpr double kLogvarMax = 20.0;

  int64_t numBlocks() const { return static_cast<int64_t>(blockOutChannels.size()); }
  // Image pixels per latent pixel along one side (8 for four levels).
  int64_t downscaleFactor() const { return int64_t{1} << (numBlocks() - 1); }
  // The decoder's levels (decoder_block_out_channels, else block_out_channels).
  const std::vector<int64_t>& decoderChannels() const {
    return decoderBlockOutChannels.empty() ? blockOutChannels : decoderBlockOutChannels;
  }
  bool batchNormLatents() const { return cls == VaeClass::AutoencoderKLFlux2; }
  // Channels of the batch norm (patch rows x cols x latent channels): 0 without one.
  int64_t batchNormChannels() const { return batchNormLatents() ? patchSize[0] * patchSize[1] * latentChannels : 0; }
  // The training latents' channels and pixels per training-latent pixel (rows,
  // cols): the latents themselves for AutoencoderKL, patchified for FLUX.2.
  int64_t trainingChannels() const { return batchNormLatents() ? batchNormChannels() : latentChannels; }
  std::array<int64_t, 2> trainingDownscale() const {
    const int64_t f = downscaleFactor();
    return batchNormLatents() ? std::array<int64_t, 2>{f * patchSize[0], f * patchSize[1]}
                              : std::array<int64_t, 2>{f, f};
  }

  // Throws ConfigError naming the field when the shape is inconsistent.
  void validate() const;

  // Presets: "flux1" (FLUX.1's ae: 16 latent channels, no quant convs, ~84 M
  // parameters), "sd" (SD 1.x: 4 latent channels, quant convs) and "flux2"
  // (FLUX.2's AutoencoderKLFlux2: 32 latent channels, quant convs, 2x2 patch,
  // batch norm eps 1e-4; diffusers' defaults, which its convert script uses).
  static VaeConfig flux1();
  static VaeConfig sd1();
  static VaeConfig flux2();
  static VaeConfig preset(const std::string& name);  // throws ConfigError on an unknown name

  // From a diffusers config.json object (_class_name AutoencoderKL or
  // AutoencoderKLFlux2); absent keys take that class's diffusers defaults
  // (AutoencoderKL's are SD's, not FLUX's). Refuses other block types,
  // activations and latents_mean/std normalisation with a ConfigError naming the key.
  static VaeConfig fromDiffusersJson(const nlohmann::json& j);
  static VaeConfig fromDiffusersJsonFile(const std::filesystem::path& path);
  nlohmann::json toDiffusersJson() const;  // round-trips with fromDiffusersJson

  bool operator==(const VaeConfig& o) const;
  bool operator!=(const VaeConfig& o) const { return !(*this == o); }
};

// What tensor shapes cannot tell: GroupNorm's group count, the latent
// scale/shift, the batch norm's eps and patch layout, and diffusers' bookkeeping
// keys. Unset: 32 groups (every released SD/FLUX VAE), FLUX.1's 0.3611/0.1159
// for 16 latent channels (SD3's VAE has the same shapes with other factors: pass
// them), SD's 0.18215/0 otherwise; for a FLUX.2 VAE (bn.running_* present) eps
// 1e-4, momentum 0.1 and a square patch (2x2 for 4 x latent channels).
struct VaeHints {
  std::optional<int64_t> normNumGroups;
  std::optional<double> scalingFactor;
  std::optional<double> shiftFactor;
  std::optional<int64_t> sampleSize;
  std::optional<bool> forceUpcast;
  std::optional<double> batchNormEps;
  std::optional<double> batchNormMomentum;
  std::optional<std::array<int64_t, 2>> patchSize;

  // The hints that give back `cfg` from its own shapes.
  static VaeHints of(const VaeConfig& cfg);
};

// From tensor names and shapes in diffusers, legacy diffusers (query/key/value)
// or ldm naming (detected; BFL's flux2-vae.safetensors included). A key set with
// bn.running_mean is a FLUX.2 VAE (AutoencoderKLFlux2). Throws LoadError naming
// a missing or mis-shaped key.
VaeConfig vaeConfigFromShapes(const std::map<std::string, std::vector<int64_t>>& shapes, const VaeHints& hints = {});

// Every parameter of the model `cfg` describes: diffusers key -> shape (pure; the
// built model's named_parameters() equals it, a unit test checks that).
std::map<std::string, std::vector<int64_t>> vaeParamShapes(const VaeConfig& cfg);
// The buffers a checkpoint must hold besides the parameters: FLUX.2's
// bn.running_mean and bn.running_var [batchNormChannels()]; none for AutoencoderKL.
// (diffusers also writes bn.num_batches_tracked, a training counter nothing reads.)
std::map<std::string, std::vector<int64_t>> vaeBufferShapes(const VaeConfig& cfg);
constexpr const char* kVaeBatchNormCounterKey = "bn.num_batches_tracked";
int64_t vaeParamCount(const VaeConfig& cfg);

// Bytes of activations alive at the peak of one encode (image [batch, 3, height,
// width] -> moments) or one decode (latents of an image that size -> image),
// untiled and without autograd, activations `elementBytes` wide. Walked in the
// order AutoencoderKL.cpp makes and frees its tensors; every convolution also
// counts a workspace of its input plus its output (cuDNN and oneDNN reorder NCHW
// into their own layout). FLUX.1's VAE at 1024 px in bf16 on an H200: measured
// 1.95 GB (encode) and 2.63 GB (decode) above the weights, estimated 1.89 / 2.55.
int64_t vaeEncodePeakBytes(const VaeConfig& cfg, int64_t batch, int64_t height, int64_t width, int64_t elementBytes);
int64_t vaeDecodePeakBytes(const VaeConfig& cfg, int64_t batch, int64_t height, int64_t width, int64_t elementBytes);

}  // namespace strata::vae
