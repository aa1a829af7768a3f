#include "models/vae/VaeNames.h"

#include <algorithm>
#include <cctype>

#include "common/Text.h"

namespace strata::vae {

const char* toString(VaeWeightFormat format) {
  switch (format) {
    case VaeWeightFormat::Ldm:
      return "ldm";
    case VaeWeightFormat::LdmFlux2:
      return "ldm (FLUX.2)";
    case VaeWeightFormat::DiffusersLegacyAttention:
      return "legacy diffusers";
    case VaeWeightFormat::Diffusers:
      break;
  }
  return "diffusers";
}

namespace names {

namespace {

// A module prefix in diffusers naming and in the other naming. Placeholders:
// {i} a level index, {j} a resnet index, {r} the level counted from the other
// end (ldm's decoder.up). The first rule whose prefix matches wins, so the
// more specific rules come first; what follows the prefix is kept as it is.
struct Rule {
  std::string diffusers;
  std::string other;
};

std::vector<Rule> makeLdmRules(bool flux2) {
  std::vector<Rule> r;
  for (const std::string side : {"encoder", "decoder"}) {
    r.push_back({side + ".conv_in", side + ".conv_in"});
    r.push_back({side + ".conv_out", side + ".conv_out"});
    r.push_back({side + ".conv_norm_out", side + ".norm_out"});
    r.push_back({side + ".mid_block.resnets.0", side + ".mid.block_1"});
    r.push_back({side + ".mid_block.resnets.1", side + ".mid.block_2"});
    const std::string attn = side + ".mid_block.attentions.0.";
    r.push_back({attn + "group_norm", side + ".mid.attn_1.norm"});
    r.push_back({attn + "to_q", side + ".mid.attn_1.q"});
    r.push_back({attn + "to_k", side + ".mid.attn_1.k"});
    r.push_back({attn + "to_v", side + ".mid.attn_1.v"});
    r.push_back({attn + "to_out.0", side + ".mid.attn_1.proj_out"});
  }
  r.push_back({"encoder.down_blocks.{i}.resnets.{j}.conv_shortcut", "encoder.down.{i}.block.{j}.nin_shortcut"});
  r.push_back({"encoder.down_blocks.{i}.resnets.{j}", "encoder.down.{i}.block.{j}"});
  r.push_back({"encoder.down_blocks.{i}.downsamplers.0.conv", "encoder.down.{i}.downsample.conv"});
  r.push_back({"decoder.up_blocks.{i}.resnets.{j}.conv_shortcut", "decoder.up.{r}.block.{j}.nin_shortcut"});
  r.push_back({"decoder.up_blocks.{i}.resnets.{j}", "decoder.up.{r}.block.{j}"});
  r.push_back({"decoder.up_blocks.{i}.upsamplers.0.conv", "decoder.up.{r}.upsample.conv"});
  r.push_back({"quant_conv", flux2 ? "encoder.quant_conv" : "quant_conv"});
  r.push_back({"post_quant_conv", flux2 ? "decoder.post_quant_conv" : "post_quant_conv"});
  r.push_back({"bn", "bn"});
  return r;
}

std::vector<Rule> makeLegacyRules() {
  std::vector<Rule> r;
  for (const std::string side : {"encoder", "decoder"}) {
    const std::string attn = side + ".mid_block.attentions.0.";
    r.push_back({attn + "to_q", attn + "query"});
    r.push_back({attn + "to_k", attn + "key"});
    r.push_back({attn + "to_v", attn + "value"});
    r.push_back({attn + "to_out.0", attn + "proj_attn"});
  }
  return r;
}

const std::vector<Rule>& ldmRules(VaeWeightFormat format) {
  static const std::vector<Rule> rules = makeLdmRules(false);
  static const std::vector<Rule> flux2Rules = makeLdmRules(true);
  return format == VaeWeightFormat::LdmFlux2 ? flux2Rules : rules;
}

const std::vector<Rule>& legacyRules() {
  static const std::vector<Rule> rules = makeLegacyRules();
  return rules;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    out.push_back(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return out;
    start = dot + 1;
  }
}

std::optional<int64_t> parseIndex(const std::string& s) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c); }))
    return std::nullopt;
  if (s.size() > 1 && s[0] == '0') return std::nullopt;  // "01" is not an index a checkpoint writes
  return std::stoll(s);
}

struct Captures {
  int64_t level = -1;  // diffusers' level index
  int64_t resnet = -1;
};

// Matches `pattern` against the leading segments of `segs` (at least one
// segment must follow it, the parameter name). Fills the captures; {r} is
// turned into the diffusers level.
bool matchPrefix(const std::vector<std::string>& pattern, const std::vector<std::string>& segs, int64_t numBlocks,
                 Captures& c) {
  if (segs.size() <= pattern.size()) return false;
  for (size_t k = 0; k < pattern.size(); ++k) {
    const std::string& p = pattern[k];
    if (p == "{i}" || p == "{r}" || p == "{j}") {
      const auto v = parseIndex(segs[k]);
      if (!v) return false;
      if (p == "{j}") {
        c.resnet = *v;
        continue;
      }
      if (*v >= numBlocks) return false;
      c.level = p == "{i}" ? *v : numBlocks - 1 - *v;
    } else if (p != segs[k]) {
      return false;
    }
  }
  return true;
}

std::string render(const std::vector<std::string>& pattern, const std::vector<std::string>& segs, size_t matched,
                   const Captures& c, int64_t numBlocks) {
  std::string out;
  auto append = [&](const std::string& s) { out += (out.empty() ? "" : ".") + s; };
  for (const auto& p : pattern) {
    if (p == "{i}")
      append(std::to_string(c.level));
    else if (p == "{r}")
      append(std::to_string(numBlocks - 1 - c.level));
    else if (p == "{j}")
      append(std::to_string(c.resnet));
    else
      append(p);
  }
  for (size_t k = matched; k < segs.size(); ++k) append(segs[k]);
  return out;
}

// Rewrites `key` from one side of `rules` to the other (toOther: diffusers -> other).
std::optional<std::string> apply(const std::vector<Rule>& rules, const std::string& key, bool toOther,
                                 int64_t numBlocks) {
  const auto segs = split(key);
  for (const auto& rule : rules) {
    const auto from = split(toOther ? rule.diffusers : rule.other);
    Captures c;
    if (!matchPrefix(from, segs, numBlocks, c)) continue;
    return render(split(toOther ? rule.other : rule.diffusers), segs, from.size(), c, numBlocks);
  }
  return std::nullopt;
}

}  // namespace

VaeWeightFormat detectFormat(const std::vector<std::string>& keys) {
  bool legacy = false, ldm = false, innerQuantConvs = false;
  for (const auto& k : keys) {
    if (startsWith(k, "encoder.down.") || startsWith(k, "decoder.up.") || startsWith(k, "encoder.mid.") ||
        startsWith(k, "decoder.mid."))
      ldm = true;
    if (startsWith(k, "encoder.quant_conv.") || startsWith(k, "decoder.post_quant_conv.")) innerQuantConvs = true;
    for (const auto& rule : legacyRules())
      if (startsWith(k, rule.other + ".")) legacy = true;
  }
  if (ldm) return innerQuantConvs ? VaeWeightFormat::LdmFlux2 : VaeWeightFormat::Ldm;
  return legacy ? VaeWeightFormat::DiffusersLegacyAttention : VaeWeightFormat::Diffusers;
}

int64_t ldmBlockCount(const std::vector<std::string>& keys) {
  int64_t n = 0;
  for (const auto& k : keys) {
    const auto segs = split(k);
    if (segs.size() < 3) continue;
    if ((segs[0] == "encoder" && segs[1] == "down") || (segs[0] == "decoder" && segs[1] == "up")) {
      if (const auto v = parseIndex(segs[2])) n = std::max(n, *v + 1);
    }
  }
  return n;
}

std::optional<std::string> fileKey(const std::string& key, VaeWeightFormat format, int64_t numBlocks) {
  switch (format) {
    case VaeWeightFormat::Ldm:
    case VaeWeightFormat::LdmFlux2:
      return apply(ldmRules(format), key, /*toOther=*/true, numBlocks);
    case VaeWeightFormat::DiffusersLegacyAttention: {
      const auto legacy = apply(legacyRules(), key, true, numBlocks);
      return legacy ? legacy : std::optional<std::string>(key);
    }
    case VaeWeightFormat::Diffusers:
      break;
  }
  return key;
}

std::optional<std::string> diffusersKey(const std::string& key, VaeWeightFormat format, int64_t numBlocks) {
  switch (format) {
    case VaeWeightFormat::Ldm:
    case VaeWeightFormat::LdmFlux2:
      return apply(ldmRules(format), key, /*toOther=*/false, numBlocks);
    case VaeWeightFormat::DiffusersLegacyAttention: {
      const auto modern = apply(legacyRules(), key, false, numBlocks);
      return modern ? modern : std::optional<std::string>(key);
    }
    case VaeWeightFormat::Diffusers:
      break;
  }
  return key;
}

bool isAttentionProjectionWeight(const std::string& key) {
  for (const std::string side : {"encoder", "decoder"}) {
    const std::string attn = side + ".mid_block.attentions.0.";
    for (const char* proj : {"to_q", "to_k", "to_v", "to_out.0"})
      if (key == attn + proj + ".weight") return true;
  }
  return false;
}

std::vector<int64_t> fileShape(const std::string& key, const std::vector<int64_t>& shape, VaeWeightFormat format) {
  if (!isLdm(format) || !isAttentionProjectionWeight(key) || shape.size() != 2) return shape;
  return {shape[0], shape[1], 1, 1};
}

std::map<std::string, std::vector<int64_t>> toDiffusersShapes(
    const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::vector<std::string> keys;
  for (const auto& kv : shapes) keys.push_back(kv.first);
  const VaeWeightFormat format = detectFormat(keys);
  const int64_t numBlocks = isLdm(format) ? ldmBlockCount(keys) : 0;
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& [key, shape] : shapes) {
    const auto mapped = diffusersKey(key, format, numBlocks);
    const std::string name = mapped ? *mapped : key;
    auto s = shape;
    if (isAttentionProjectionWeight(name) && s.size() == 4 && s[2] == 1 && s[3] == 1) s.resize(2);
    out[name] = s;
  }
  return out;
}

}  // namespace names
}  // namespace strata::vae
