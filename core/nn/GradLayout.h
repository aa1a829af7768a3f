#pragma once
// An autograd identity that fixes the layout of the gradient flowing back through it.
#include <ATen/ATen.h>

namespace strata::nn {

// x itself in the forward; in the backward the gradient handed to x's producer has x's
// strides: the incoming one when it has them already (no copy), else a copy in x's layout.
// For a kernel whose backward requires dO to be laid out as its output O (cuDNN's
// attention backward has; flash does not care), where the gradient may arrive as a
// strided narrow of a larger one (nn/Attention.h says why it matters there). x that is not
// dense (expanded, overlapping), or no gradient needed: x returned as it is.
at::Tensor gradInLayoutOf(const at::Tensor& x);

}  // namespace strata::nn
