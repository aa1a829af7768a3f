#pragma once
// Every AutoencoderKL key rule in one place. The model's parameters carry the
// diffusers names; a file may use them, the legacy diffusers attention names
// (query/key/value/proj_attn, SD-era diffusers folders) or the original ldm
// names that BFL's ae.safetensors and ComfyUI use:
//   encoder.down.N.block.M.*          <-> encoder.down_blocks.N.resnets.M.*
//   encoder.down.N.downsample.conv    <-> encoder.down_blocks.N.downsamplers.0.conv
//   *.block.M.nin_shortcut            <-> *.resnets.M.conv_shortcut
//   *.mid.block_1 / block_2           <-> *.mid_block.resnets.0 / 1
//   *.mid.attn_1.norm / q / k / v / proj_out
//                                     <-> *.mid_block.attentions.0.group_norm / to_q / to_k / to_v / to_out.0
//   *.norm_out                        <-> *.conv_norm_out
//   decoder.up.(n-1-N).*              <-> decoder.up_blocks.N.*  (ldm counts the decoder levels upwards)
//   decoder.up.K.upsample.conv        <-> decoder.up_blocks.N.upsamplers.0.conv
// ldm stores the attention projections as 1x1 convs ([C, C, 1, 1]); diffusers as
// Linears ([C, C]). The rule table is used in both directions.
// FLUX.2's VAE adds the batch norm (bn.running_mean / running_var, the same name
// everywhere); BFL's flux2-vae.safetensors keeps its quant convs inside the
// encoder and decoder (the "ldm (FLUX.2)" format):
//   encoder.quant_conv                <-> quant_conv
//   decoder.post_quant_conv           <-> post_quant_conv
// where SD's ldm files have them at the top level as diffusers does.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::vae {

enum class VaeWeightFormat { Diffusers, DiffusersLegacyAttention, Ldm, LdmFlux2 };
const char* toString(VaeWeightFormat format);
// Ldm and LdmFlux2: ldm's module names and 1x1-conv attention projections.
inline bool isLdm(VaeWeightFormat format) {
  return format == VaeWeightFormat::Ldm || format == VaeWeightFormat::LdmFlux2;
}

namespace names {

// The naming of a key set: ldm when any key starts with "encoder.down." or
// "decoder.up." (LdmFlux2 when it also has encoder.quant_conv or
// decoder.post_quant_conv), legacy when a mid-block attention uses query/key/value.
VaeWeightFormat detectFormat(const std::vector<std::string>& keys);

// Number of levels named by ldm keys (largest encoder.down.N / decoder.up.N + 1).
int64_t ldmBlockCount(const std::vector<std::string>& keys);

// The name a file of `format` gives the diffusers key (numBlocks: the number of
// levels, needed for ldm's reversed decoder). nullopt: no rule covers the key.
std::optional<std::string> fileKey(const std::string& diffusersKey, VaeWeightFormat format, int64_t numBlocks);
// The inverse: a file's key -> the diffusers key. nullopt: no rule covers it.
std::optional<std::string> diffusersKey(const std::string& fileKey, VaeWeightFormat format, int64_t numBlocks);

// A mid-block attention projection weight (to_q / to_k / to_v / to_out.0),
// stored as a [C, C, 1, 1] conv in ldm files.
bool isAttentionProjectionWeight(const std::string& diffusersKey);

// The file's shape for a diffusers parameter shape (adds the 1x1 for ldm convs).
std::vector<int64_t> fileShape(const std::string& diffusersKey, const std::vector<int64_t>& shape,
                               VaeWeightFormat format);

// A whole key -> shape map converted to diffusers names (shapes of 1x1 conv
// projections squeezed). Keys no rule covers are kept as they are.
std::map<std::string, std::vector<int64_t>> toDiffusersShapes(
    const std::map<std::string, std::vector<int64_t>>& shapes);

}  // namespace names
}  // namespace strata::vae
