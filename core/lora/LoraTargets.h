#pragma once
// Which Linear layers of a model get a LoRA adapter, by module path.
//
// A pattern is one of:
//   - a plain name, peft's rule: matches a path equal to it or ending in "." + it
//     ("to_q" matches "transformer_blocks.0.attn.to_q"; "proj_out" matches the
//     top-level "proj_out" and "single_transformer_blocks.3.proj_out");
//   - a glob with * and ? over the whole path ("single_transformer_blocks.*.proj_mlp");
//   - "re:" + an ECMAScript regex that must match the whole path.
// The default set of a model family is its nn::LoraNameRules::defaultTargets().
#include <string>
#include <vector>

namespace strata::lora {

class LoraTargets {
 public:
  // Throws strata::ConfigError naming a pattern that is not a valid regex.
  explicit LoraTargets(std::vector<std::string> include, std::vector<std::string> exclude = {});

  bool matches(const std::string& modulePath) const;
  const std::vector<std::string>& include() const { return include_; }
  const std::vector<std::string>& exclude() const { return exclude_; }

  static bool patternMatches(const std::string& pattern, const std::string& modulePath);

 private:
  std::vector<std::string> include_;
  std::vector<std::string> exclude_;
};

}  // namespace strata::lora
