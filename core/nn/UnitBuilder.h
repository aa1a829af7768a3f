#pragma once
// Builds one unit's modules (a block, or a stem / head's modules) from its layout
// of nn::ModuleSpec rows, in layout order, each registered at its path under the
// root with plain containers made on the way ("attn.to_out.0"): names, shapes and
// the order the random init draws in all come from the layout. The model says how
// one row becomes a module (`make`: its Linear, its norm with its eps and init);
// its constructors only pick their members by path.
#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/ParamPlan.h"

namespace strata::nn {

class UnitBuilder {
 public:
  using Make = std::function<std::shared_ptr<torch::nn::Module>(const ModuleSpec&)>;
  UnitBuilder(torch::nn::Module& root, const std::vector<ModuleSpec>& layout, const Make& make);

  // The module at `path` as T (an Impl type); throws strata::Error when the layout
  // has none there or it is of another type.
  template <class T>
  std::shared_ptr<T> get(const std::string& path) const {
    auto m = std::dynamic_pointer_cast<T>(find(path));
    if (!m) wrongType(path);
    return m;
  }
  // The container at `path` ("time_text_embed"): the root's child of that name when
  // it has one already, else made now.
  std::shared_ptr<torch::nn::Module> container(const std::string& path);

 private:
  std::shared_ptr<torch::nn::Module> find(const std::string& path) const;
  [[noreturn]] static void wrongType(const std::string& path);

  torch::nn::Module& root_;
  std::map<std::string, std::shared_ptr<torch::nn::Module>> modules_;
  std::map<std::string, std::shared_ptr<torch::nn::Module>> containers_;
};

}  // namespace strata::nn
