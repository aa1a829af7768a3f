#pragma once
// What FLUX.1's and FLUX.2's configs share: the diffusers config.json keys of the
// double/single stack (read and written), their bounds, and the reading of a
// checkpoint's tensor shapes (header only) that detects a config. The config
// structs stay the models'; the helpers take any config with the stack's members
// (patchSize, inChannels, outChannels, numLayers, numSingleLayers,
// attentionHeadDim, numAttentionHeads, jointAttentionDim, guidanceEmbeds, axesDimsRope).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/Error.h"
#include "io/FileBytes.h"
#include "io/JsonFields.h"
#include "io/JsonFile.h"

namespace strata::dit {

// The stack's config.json keys present in `fields` into `c` (absent ones untouched;
// out_channels absent: in_channels, as diffusers does).
template <class Config>
void readStackKeys(const io::JsonFields& fields, Config& c) {
  fields.read("patch_size", c.patchSize);
  fields.read("in_channels", c.inChannels);
  if (!fields.read("out_channels", c.outChannels)) c.outChannels = c.inChannels;
  fields.read("num_layers", c.numLayers);
  fields.read("num_single_layers", c.numSingleLayers);
  fields.read("attention_head_dim", c.attentionHeadDim);
  fields.read("num_attention_heads", c.numAttentionHeads);
  fields.read("joint_attention_dim", c.jointAttentionDim);
  fields.read("guidance_embeds", c.guidanceEmbeds);
  fields.read("axes_dims_rope", c.axesDimsRope);
}

template <class Config>
void writeStackKeys(nlohmann::json& j, const Config& c) {
  j["patch_size"] = c.patchSize;
  j["in_channels"] = c.inChannels;
  j["out_channels"] = c.outChannels;
  j["num_layers"] = c.numLayers;
  j["num_single_layers"] = c.numSingleLayers;
  j["attention_head_dim"] = c.attentionHeadDim;
  j["num_attention_heads"] = c.numAttentionHeads;
  j["joint_attention_dim"] = c.jointAttentionDim;
  j["guidance_embeds"] = c.guidanceEmbeds;
  j["axes_dims_rope"] = c.axesDimsRope;
}

// Config::fromDiffusersJson of a config.json file: IoError naming the file (not a
// regular file, over 1 MB, nested too deep, not JSON), ConfigError prefixed with it.
template <class Config>
Config configFromJsonFile(const std::filesystem::path& path) {
  const nlohmann::json j = io::readJsonFile(path, io::kMaxSmallFileBytes);
  try {
    return Config::fromDiffusersJson(j);
  } catch (const ConfigError& e) {
    throw ConfigError(path.string() + ": " + e.what());
  }
}

// One bounded key: name, value, most.
using Bound = std::tuple<const char*, int64_t, int64_t>;

// The stack's bounds, then `extra`, then the rotary axes (io::requireAtMost, ConfigError
// naming `who` and the key): checked first, as everything else multiplies these.
void requireStackBounds(const std::string& who, const std::vector<Bound>& stack, const std::vector<Bound>& extra,
                        const std::vector<int64_t>& axesDimsRope);
template <class Config>
std::vector<Bound> stackBounds(const Config& c);

// The rotary axes: not empty, each even and positive, summing to the head dim
// (ConfigError "<who>: ..." naming axes_dims_rope).
void requireRotaryAxes(const std::string& who, const std::vector<int64_t>& axesDimsRope, int64_t attentionHeadDim);

// The "tiny" presets' stack (both models): 2 double + 4 single blocks, 4 heads of 32,
// 64 latent channels in and out.
template <class Config>
void setTinyStack(Config& c) {
  c.inChannels = 64;
  c.outChannels = 64;
  c.numLayers = 2;
  c.numSingleLayers = 4;
  c.attentionHeadDim = 32;
  c.numAttentionHeads = 4;
}

// Reads a checkpoint's tensor names and shapes for config detection; errors are
// LoadErrors naming `who` ("FluxConfig") and the key.
class ShapeReader {
 public:
  ShapeReader(const std::map<std::string, std::vector<int64_t>>& shapes, std::string who);
  bool has(const std::string& key) const { return shapes_.count(key) > 0; }
  // The shape of `key`, which must have rank `rank`.
  const std::vector<int64_t>& shapeOf(const std::string& key, size_t rank) const;
  // Highest block index + 1 over keys "<prefix>.<N>." (0 when there is none).
  int64_t countBlocks(const std::string& prefix) const;

 private:
  const std::map<std::string, std::vector<int64_t>>& shapes_;
  std::string who_;
};

template <class Config>
std::vector<Bound> stackBounds(const Config& c) {
  return {Bound{"in_channels", c.inChannels, io::limits::kWidth},
          {"out_channels", c.outChannels, io::limits::kWidth},
          {"num_layers", c.numLayers, io::limits::kLayers},
          {"num_single_layers", c.numSingleLayers, io::limits::kLayers},
          {"attention_head_dim", c.attentionHeadDim, io::limits::kWidth},
          {"num_attention_heads", c.numAttentionHeads, io::limits::kHeads},
          {"joint_attention_dim", c.jointAttentionDim, io::limits::kWidth}};
}

}  // namespace strata::dit
