#include "dit/LatentPatch.h"

#include <string>

#include "common/Error.h"
#include "common/ShapeText.h"

namespace strata::dit {

namespace {

void requirePatch(const char* who, int64_t rows, int64_t cols) {
  if (rows < 1 || cols < 1)
    throw Error(std::string(who) + ": patch " + std::to_string(rows) + "x" + std::to_string(cols) +
                " must be positive");
}

}  // namespace

at::Tensor patchifyLatents(const at::Tensor& latents, int64_t rows, int64_t cols) {
  requirePatch("patchifyLatents", rows, cols);
  if (latents.dim() != 4 || latents.size(2) % rows != 0 || latents.size(3) % cols != 0)
    throw Error("patchifyLatents: expected [B, C, H, W] with H a multiple of " + std::to_string(rows) + " and W of " +
                std::to_string(cols) + ", got " + shapeText(latents.sizes()));
  const int64_t b = latents.size(0), c = latents.size(1), h = latents.size(2), w = latents.size(3);
  return latents.reshape({b, c, h / rows, rows, w / cols, cols})
      .permute({0, 1, 3, 5, 2, 4})
      .reshape({b, c * rows * cols, h / rows, w / cols});  // [B, C rows cols, H/rows, W/cols]
}

at::Tensor unpatchifyLatents(const at::Tensor& patchified, int64_t rows, int64_t cols) {
  requirePatch("unpatchifyLatents", rows, cols);
  if (patchified.dim() != 4 || patchified.size(1) % (rows * cols) != 0)
    throw Error("unpatchifyLatents: expected [B, C * " + std::to_string(rows * cols) + ", h, w], got " +
                shapeText(patchified.sizes()));
  const int64_t b = patchified.size(0), c = patchified.size(1) / (rows * cols);
  const int64_t h = patchified.size(2), w = patchified.size(3);
  return patchified.reshape({b, c, rows, cols, h, w})
      .permute({0, 1, 4, 2, 5, 3})
      .reshape({b, c, h * rows, w * cols});  // [B, C, h rows, w cols]
}

}  // namespace strata::dit
