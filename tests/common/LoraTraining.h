#pragma once
// For tests that compare two ways of training the same LoRA network: one backward of a
// loss, what it gave (the loss, every adapter's gradients) and which fused Function the
// forward took, with the gradients cleared for the next run.
#include <ATen/ATen.h>

#include <vector>

#include "common/FusedPaths.h"
#include "lora/LoraNetwork.h"

namespace strata::test {

struct LoraTraining {
  double loss = 0;
  std::vector<at::Tensor> grads;  // down, up of every adapter
  int fusedNodes = 0;             // LoraSiblingsAdd nodes in the backward graph
};

// Backward of `loss` through `net`; the adapters' gradients are taken (and cleared).
inline LoraTraining backwardThrough(const at::Tensor& loss, lora::LoraNetwork& net) {
  LoraTraining t;
  t.fusedNodes = countGraphNodes(loss, "LoraSiblingsAdd");
  loss.backward();
  t.loss = loss.item<double>();
  for (const auto& a : net.adapters()) {
    t.grads.push_back(a->down.grad().clone());
    t.grads.push_back(a->up.grad().clone());
    a->down.mutable_grad() = at::Tensor();
    a->up.mutable_grad() = at::Tensor();
  }
  return t;
}

}  // namespace strata::test
