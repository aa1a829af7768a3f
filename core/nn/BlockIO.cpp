#include "nn/BlockIO.h"

#include "common/Error.h"

namespace strata::nn {

namespace {
at::Tensor moved(const at::Tensor& t, const c10::Device& device) {
  if (!t.defined() || t.device() == device) return t;
  return t.to(device, /*non_blocking=*/false);
}
}  // namespace

BlockIO BlockIO::to(const c10::Device& device) const {
  BlockIO out;
  out.img = moved(img, device);
  out.txt = moved(txt, device);
  out.temb = moved(temb, device);
  out.ropeCos = moved(ropeCos, device);
  out.ropeSin = moved(ropeSin, device);
  out.mask = moved(mask, device);
  return out;
}

std::vector<at::Tensor> BlockIO::fields() const { return {img, txt, temb, ropeCos, ropeSin, mask}; }

BlockIO BlockIO::fromFields(const std::vector<at::Tensor>& f) {
  if (f.size() != static_cast<size_t>(kFieldCount)) {
    throw Error("BlockIO::fromFields: expected " + std::to_string(kFieldCount) + " fields, got " +
                std::to_string(f.size()));
  }
  BlockIO io;
  io.img = f[0];
  io.txt = f[1];
  io.temb = f[2];
  io.ropeCos = f[3];
  io.ropeSin = f[4];
  io.mask = f[5];
  return io;
}

}  // namespace strata::nn
