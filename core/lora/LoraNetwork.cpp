#include "lora/LoraNetwork.h"

#include <torch/autograd.h>

#include <set>
#include <sstream>
#include <unordered_map>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "common/Text.h"

namespace strata::lora {

namespace {

// The key suffixes of a network's state dict (peft's).
constexpr const char* kDownSuffix = ".lora_A.weight";
constexpr const char* kUpSuffix = ".lora_B.weight";

// Every nn::Linear of the model by module path, in named_modules() order.
std::vector<std::pair<std::string, std::shared_ptr<nn::LinearImpl>>> linearModules(torch::nn::Module& model) {
  std::vector<std::pair<std::string, std::shared_ptr<nn::LinearImpl>>> out;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    if (auto linear = std::dynamic_pointer_cast<nn::LinearImpl>(item.value())) out.emplace_back(item.key(), linear);
  }
  return out;
}

}  // namespace

std::shared_ptr<LoraNetwork> LoraNetwork::create(torch::nn::Module& model, const LoraConfig& config,
                                                 const nn::LoraNameRules& rules) {
  if (!config.targetModules.empty()) return create(model, config);
  LoraConfig withDefaults = config;
  withDefaults.targetModules = rules.defaultTargets();
  return create(model, withDefaults);
}

std::shared_ptr<LoraNetwork> LoraNetwork::create(torch::nn::Module& model, const LoraConfig& config) {
  if (config.targetModules.empty())
    throw ConfigError("network.target_modules: empty, and no model family's default targets were given");
  if (config.rank <= 0)
    throw ConfigError("network.linear: LoRA rank must be positive, got " + std::to_string(config.rank));
  if (config.dropout < 0.0 || config.dropout >= 1.0)
    throw ConfigError("network.dropout: must be in [0, 1), got " + std::to_string(config.dropout));
  if (config.dtype != at::kFloat && config.dtype != at::kBFloat16)
    throw ConfigError(std::string("network.dtype: LoRA weights are float32 or bfloat16, not ") +
                      c10::toString(config.dtype));
  const LoraTargets targets(config.targetModules, config.excludeModules);
  // Training an adapter freezes the model it adapts (before the adapters exist,
  // so only the base is touched): base-weight gradients would double the memory
  // of every card, which is what the 20 GB-capped proof ran into.
  for (auto& p : model.parameters()) p.requires_grad_(false);
  std::shared_ptr<LoraNetwork> net(new LoraNetwork());
  for (const auto& [path, linear] : linearModules(model)) {
    if (!targets.matches(path)) continue;
    net->adapters_.push_back(std::make_shared<LoraAdapter>(path, linear, config.rank, config.alpha, config.dropout,
                                                           net->multiplier_, config.dtype));
  }
  if (net->adapters_.empty()) {
    std::string patterns;
    for (const auto& p : targets.include()) patterns += (patterns.empty() ? "" : ", ") + p;
    throw ConfigError("network.target_modules: no Linear layer of the model matches [" + patterns + "]");
  }
  net->attach();
  return net;
}

std::shared_ptr<LoraNetwork> LoraNetwork::fromWeights(torch::nn::Module& model,
                                                      const std::vector<LoraModuleWeights>& weights, double dropout) {
  std::unordered_map<std::string, const LoraModuleWeights*> byPath;
  for (const auto& w : weights) {
    if (!byPath.emplace(w.modulePath, &w).second)
      throw LoadError("LoRA: two adapters for module '" + w.modulePath + "'");
  }
  std::shared_ptr<LoraNetwork> net(new LoraNetwork());
  size_t used = 0;
  for (const auto& [path, linear] : linearModules(model)) {
    const auto it = byPath.find(path);
    if (it == byPath.end()) continue;
    const LoraModuleWeights& w = *it->second;
    if (w.down.dim() != 2 || w.up.dim() != 2 || w.down.size(1) != linear->inFeatures() ||
        w.up.size(0) != linear->outFeatures() || w.up.size(1) != w.down.size(0)) {
      throw LoadError("LoRA for module '" + path + "': down " + shapeText(w.down.sizes()) + " and up " +
                      shapeText(w.up.sizes()) + " do not fit its Linear [" + std::to_string(linear->outFeatures()) +
                      ", " + std::to_string(linear->inFeatures()) + "]");
    }
    auto adapter = std::make_shared<LoraAdapter>(path, linear, w.down.size(0), w.alpha, dropout, net->multiplier_);
    adapter->setWeights(w.down, w.up);
    net->adapters_.push_back(std::move(adapter));
    ++used;
  }
  if (used != byPath.size()) {
    for (const auto& w : weights) {
      if (!net->adapter(w.modulePath))
        throw LoadError("LoRA: '" + w.modulePath + "' is not a Linear layer of the model");
    }
  }
  net->attach();
  return net;
}

LoraNetwork::~LoraNetwork() {
  try {
    if (merged_) unmerge();
    detach();
  } catch (...) {
    // A destructor must not throw; the model keeps whatever state it reached.
  }
}

void LoraNetwork::attach() {
  if (attached_ || merged_) {
    attached_ = true;
    return;
  }
  for (const auto& a : adapters_) a->host()->addAdapter(a);
  attached_ = true;
}

void LoraNetwork::detach() {
  if (!attached_) return;
  if (!merged_)
    for (const auto& a : adapters_) a->host()->removeAdapter(a.get());
  attached_ = false;
}

void LoraNetwork::merge() {
  if (merged_) return;
  if (multiplier_->isPerSample())
    throw Error("LoRA merge: a per-sample multiplier cannot be folded into the base weights");
  for (const auto& a : adapters_)
    if (a->host()->quantType() != nn::QuantType::None)
      throw Error("LoRA merge: " + a->hostPath() +
                  " is quantized; a merge would be rounded away (merge into the "
                  "float base instead)");
  torch::NoGradGuard noGrad;
  mergedMultiplier_ = multiplier_->scalar();
  for (const auto& a : adapters_) {
    auto& w = a->host()->weight;
    w.add_((a->deltaWeight() * mergedMultiplier_).to(w.device(), w.scalar_type()));
    if (attached_) a->host()->removeAdapter(a.get());
  }
  merged_ = true;
}

void LoraNetwork::unmerge() {
  if (!merged_) return;
  torch::NoGradGuard noGrad;
  for (const auto& a : adapters_) {
    auto& w = a->host()->weight;
    w.sub_((a->deltaWeight() * mergedMultiplier_).to(w.device(), w.scalar_type()));
  }
  merged_ = false;
  if (attached_)
    for (const auto& a : adapters_) a->host()->addAdapter(a);
}

void LoraNetwork::setMultiplier(double value) { multiplier_->set(value); }

void LoraNetwork::setMultiplier(const at::Tensor& perSample) { multiplier_->set(perSample); }

void LoraNetwork::train(bool on) {
  for (const auto& a : adapters_) a->train(on);
}

std::vector<at::Tensor> LoraNetwork::parameters() const {
  std::vector<at::Tensor> out;
  out.reserve(adapters_.size() * 2);
  for (const auto& a : adapters_) {
    out.push_back(a->down);
    out.push_back(a->up);
  }
  return out;
}

int64_t LoraNetwork::numParameters() const {
  int64_t n = 0;
  for (const auto& a : adapters_) n += a->down.numel() + a->up.numel();
  return n;
}

std::shared_ptr<LoraAdapter> LoraNetwork::adapter(const std::string& modulePath) const {
  for (const auto& a : adapters_)
    if (a->hostPath() == modulePath) return a;
  return nullptr;
}

std::vector<std::pair<std::string, at::Tensor>> LoraNetwork::stateDict(const std::string& prefix) const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.reserve(adapters_.size() * 2);
  for (const auto& a : adapters_) {
    out.emplace_back(prefix + a->hostPath() + kDownSuffix, a->down);
    out.emplace_back(prefix + a->hostPath() + kUpSuffix, a->up);
  }
  return out;
}

void LoraNetwork::loadStateDict(const std::map<std::string, at::Tensor>& tensors, const std::string& prefix) {
  std::vector<std::string> missing, misShaped, unexpected;
  std::set<std::string> known;
  for (const auto& [key, param] : stateDict(prefix)) {
    known.insert(key);
    const auto it = tensors.find(key);
    if (it == tensors.end())
      missing.push_back(key);
    else if (it->second.sizes() != param.sizes())
      misShaped.push_back(key + " (expected " + shapeText(param.sizes()) + ", got " + shapeText(it->second.sizes()) +
                          ")");
  }
  for (const auto& [key, t] : tensors)
    if (!known.count(key)) unexpected.push_back(key);
  if (!missing.empty() || !misShaped.empty() || !unexpected.empty()) {
    std::string msg = "LoRA state dict does not match the network:";
    auto list = [&](const char* what, const std::vector<std::string>& keys) {
      if (keys.empty()) return;
      msg += std::string(" ") + what + ":";
      for (const auto& k : keys) msg += " " + k;
      msg += ";";
    };
    list("missing", missing);
    list("unexpected", unexpected);
    list("mis-shaped", misShaped);
    throw LoadError(msg);
  }
  for (const auto& a : adapters_)
    a->setWeights(tensors.at(prefix + a->hostPath() + kDownSuffix), tensors.at(prefix + a->hostPath() + kUpSuffix));
}

std::vector<LoraModuleWeights> LoraNetwork::moduleWeights() const {
  std::vector<LoraModuleWeights> out;
  out.reserve(adapters_.size());
  for (const auto& a : adapters_)
    out.push_back(
        {a->hostPath(), a->down.detach().to(at::kFloat).clone(), a->up.detach().to(at::kFloat).clone(), a->alpha()});
  return out;
}

std::vector<std::shared_ptr<placement::Attachment>> LoraNetwork::attachments() const {
  std::vector<std::shared_ptr<placement::Attachment>> out;
  out.reserve(adapters_.size());
  for (const auto& a : adapters_) out.push_back(std::make_shared<LoraAttachment>(a));
  return out;
}

std::vector<LoraModuleWeights> moduleWeightsFromStateDict(const std::map<std::string, at::Tensor>& tensors,
                                                          const std::string& prefix, double alpha,
                                                          const std::string& sourceName) {
  struct Pair {
    at::Tensor down, up;
  };
  std::map<std::string, Pair> byModule;
  for (const auto& [key, t] : tensors) {
    const bool down = endsWith(key, kDownSuffix);
    const size_t suffixSize = std::char_traits<char>::length(down ? kDownSuffix : kUpSuffix);
    // A module name must sit between the prefix and the suffix.
    if (!startsWith(key, prefix) || !(down || endsWith(key, kUpSuffix)) || key.size() <= prefix.size() + suffixSize)
      throw LoadError(sourceName + ": key '" + key + "' is not '" + prefix + "<module>" + kDownSuffix + "' or '" +
                      kUpSuffix + "'");
    const std::string module = key.substr(prefix.size(), key.size() - prefix.size() - suffixSize);
    (down ? byModule[module].down : byModule[module].up) = t.to(at::kFloat);
  }
  std::vector<LoraModuleWeights> out;
  for (auto& [module, p] : byModule) {
    if (!p.down.defined() || !p.up.defined())
      throw LoadError(sourceName + ": incomplete LoRA for " + module + " (no " +
                      (p.down.defined() ? kUpSuffix : kDownSuffix) + ")");
    if (p.down.dim() != 2 || p.up.dim() != 2 || p.up.size(1) != p.down.size(0))
      throw LoadError(sourceName + ": LoRA for " + module + ": down " + shapeText(p.down.sizes()) + " and up " +
                      shapeText(p.up.sizes()) + " are not a pair ([r, in] and [out, r])");
    out.push_back({module, std::move(p.down), std::move(p.up), alpha});
  }
  return out;
}

}  // namespace strata::lora
