#include "nn/UnitBuilder.h"

#include "common/Error.h"

namespace strata::nn {

UnitBuilder::UnitBuilder(torch::nn::Module& root, const std::vector<ModuleSpec>& layout, const Make& make)
    : root_(root) {
  for (const auto& m : layout) {
    const auto dot = m.path.rfind('.');
    torch::nn::Module& parent = dot == std::string::npos ? root_ : *container(m.path.substr(0, dot));
    const std::string leaf = dot == std::string::npos ? m.path : m.path.substr(dot + 1);
    modules_.emplace(m.path, parent.register_module(leaf, make(m)));
  }
}

std::shared_ptr<torch::nn::Module> UnitBuilder::find(const std::string& path) const {
  const auto it = modules_.find(path);
  if (it == modules_.end()) wrongType(path);
  return it->second;
}

void UnitBuilder::wrongType(const std::string& path) {
  throw Error("UnitBuilder: the layout has no module '" + path + "' of that type");
}

std::shared_ptr<torch::nn::Module> UnitBuilder::container(const std::string& path) {
  const auto it = containers_.find(path);
  if (it != containers_.end()) return it->second;
  const auto dot = path.rfind('.');
  torch::nn::Module& parent = dot == std::string::npos ? root_ : *container(path.substr(0, dot));
  const std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
  std::shared_ptr<torch::nn::Module> made;
  for (const auto& child : parent.named_children())
    if (child.key() == leaf) made = child.value();
  if (!made) made = parent.register_module(leaf, std::make_shared<torch::nn::Module>());
  containers_.emplace(path, made);
  return made;
}

}  // namespace strata::nn
