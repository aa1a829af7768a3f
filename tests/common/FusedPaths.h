#pragma once
// For tests of the fused paths (nn::fusedPaths): a scope that sets them on or off
// whatever STRATA_FUSED_PATHS says, and a count of an autograd graph's nodes by name
// (which fused Function a forward took).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>

#include <functional>
#include <set>
#include <string>

#include "nn/Linear.h"

namespace strata::test {

// The fused paths on or off for one scope; the setting before it is restored.
struct FusedPathsAs {
  explicit FusedPathsAs(bool on) : was_(nn::fusedPaths()) { nn::setFusedPaths(on); }
  ~FusedPathsAs() { nn::setFusedPaths(was_); }
  FusedPathsAs(const FusedPathsAs&) = delete;
  FusedPathsAs& operator=(const FusedPathsAs&) = delete;

 private:
  bool was_;
};

// How many distinct nodes whose name contains `name` t's backward graph holds.
inline int countGraphNodes(const at::Tensor& t, const std::string& name) {
  std::set<torch::autograd::Node*> seen;
  int found = 0;
  std::function<void(torch::autograd::Node*)> visit = [&](torch::autograd::Node* n) {
    if (!n || !seen.insert(n).second) return;
    if (n->name().find(name) != std::string::npos) ++found;
    for (const auto& e : n->next_edges()) visit(e.function.get());
  };
  visit(t.grad_fn().get());
  return found;
}

}  // namespace strata::test
