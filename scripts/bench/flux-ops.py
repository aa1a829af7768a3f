#!/usr/bin/env python3
"""Per-op timings at FLUX.1-dev shapes on the GPU machine (PyTorch there), for docs/speed.md.

Each candidate is the same ATen ops Strata's C++ calls, timed fwd and fwd+bwd with CUDA
events (median of repeats after warm-up), on random data. Also builds
core/dit/cuda/DitKernels.cu as a PyTorch extension and checks the fused
RMSNorm + rotary kernel against the unfused ops (relative L2, forward and input
gradient) before timing it. Usage: python3 scripts/bench/flux-ops.py [--res 1024]
"""
import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
D, H, DH, MLP, NTXT = 3072, 24, 128, 12288, 512
dev = torch.device("cuda")
bf = torch.bfloat16


def timed(fn, reps=20, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def row(name, fwd, both=None):
    s = f"{name:58s} fwd {fwd:8.3f} ms"
    if both is not None:
        s += f"   fwd+bwd {both:8.3f} ms"
    print(s, flush=True)


# ---- Strata's unfused ops (models/flux/FluxTransformer.cpp), spelled in PyTorch ----
def rms_norm_ref(x, w, eps=1e-6):
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return (x * rstd).to(w.dtype) * w


def rotary_ref(x, cos, sin):
    pairs = x.unflatten(-1, (x.shape[-1] // 2, 2))
    rot = torch.stack([-pairs[..., 1], pairs[..., 0]], -1).flatten(-2)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return (x.float() * c + rot.float() * s).to(x.dtype)


def rope_tables(n, dim=DH):
    pos = torch.arange(n, device=dev, dtype=torch.float64)
    freqs = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=dev, dtype=torch.float64) / dim))
    ang = torch.outer(pos, freqs)
    return ang.cos().repeat_interleave(2, 1).float().contiguous(), ang.sin().repeat_interleave(2, 1).float().contiguous()


def bench_fwd_bwd(make, fwd, reps=20):
    """fwd(inputs) -> out; times forward alone and forward + backward of sum(out * g)."""
    inputs = make()
    with torch.no_grad():
        t1 = timed(lambda: fwd(*inputs), reps)
    out = fwd(*inputs)
    g = torch.randn_like(out)

    def both():
        o = fwd(*inputs)
        o.backward(g)

    t2 = timed(both, reps)
    return t1, t2


def sdpa(res):
    n = (res // 16) ** 2 + NTXT
    print(f"\n== attention, {n} tokens (res {res}), q/k/v [1, N, 24, 128] transposed as Strata does", flush=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def make():
        return [torch.randn(1, n, H, DH, device=dev, dtype=bf, requires_grad=True) for _ in range(3)]

    def fwd(q, k, v):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))

    ref = None
    for name, be in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        try:
            with sdpa_kernel([be]):
                t1, t2 = bench_fwd_bwd(make, fwd, reps=10)
                torch.manual_seed(0)
                q, k, v = make()
                o = fwd(q, k, v)
                g = torch.randn_like(o)
                o.backward(g)
                torch.cuda.synchronize()
                res_ = (o.detach(), q.grad, k.grad, v.grad)
            if ref is None:
                ref = res_
                err = ""
            else:
                err = "  rel L2 vs flash: out %.2e dq %.2e dk %.2e dv %.2e" % tuple(rel(a, b) for a, b in zip(res_, ref))
            row(f"sdpa {name}", t1, t2)
            if err:
                print(err, flush=True)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"sdpa {name}: failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
            torch.cuda.synchronize()


def elementwise(res):
    ni = (res // 16) ** 2
    n = ni + NTXT
    print(f"\n== elementwise, image stream {ni} tokens, joint {n}", flush=True)
    cos, sin = rope_tables(n)
    w = (1 + 0.1 * torch.randn(DH, device=dev)).to(bf)

    def mk_q():
        return [torch.randn(1, n, H, DH, device=dev, dtype=bf, requires_grad=True)]

    row("rmsnorm (frozen, autograd) + rotary, unfused [1,N,24,128]", *bench_fwd_bwd(mk_q, lambda x: rotary_ref(rms_norm_ref(x, w), cos, sin)))
    row("rotary alone, unfused", *bench_fwd_bwd(mk_q, lambda x: rotary_ref(x, cos, sin)))
    row("rmsnorm alone, unfused (plain autograd)", *bench_fwd_bwd(mk_q, lambda x: rms_norm_ref(x, w)))
    if hasattr(torch, "rms_norm"):
        row("torch.rms_norm (ATen fused)", *bench_fwd_bwd(mk_q, lambda x: torch.rms_norm(x, (DH,), w, 1e-6)))

    def mk_x():
        return [torch.randn(1, ni, D, device=dev, dtype=bf, requires_grad=True)]

    shift = torch.randn(1, D, device=dev, dtype=bf)
    scale = torch.randn(1, D, device=dev, dtype=bf)
    gate = torch.randn(1, D, device=dev, dtype=bf)
    y = torch.randn(1, ni, D, device=dev, dtype=bf)
    row("layer_norm [1,Ni,3072]", *bench_fwd_bwd(mk_x, lambda x: F.layer_norm(x, (D,), eps=1e-6)))
    row("modulate x*(1+scale)+shift", *bench_fwd_bwd(mk_x, lambda x: x * (1 + scale[:, None]) + shift[:, None]))
    row("modulate addcmul(shift, x, 1+scale)", *bench_fwd_bwd(mk_x, lambda x: torch.addcmul(shift[:, None], x, 1 + scale[:, None])))
    row("gate x + g*y", *bench_fwd_bwd(mk_x, lambda x: x + gate[:, None] * y))
    row("gate addcmul(x, g, y)", *bench_fwd_bwd(mk_x, lambda x: torch.addcmul(x, gate[:, None], y)))
    row("gelu tanh [1,Ni,12288]", *bench_fwd_bwd(lambda: [torch.randn(1, ni, MLP, device=dev, dtype=bf, requires_grad=True)],
                                                lambda x: F.gelu(x, approximate="tanh")))
    row("cat [1,N,3072]+[1,N,12288] (single block)", *bench_fwd_bwd(
        lambda: [torch.randn(1, n, D, device=dev, dtype=bf, requires_grad=True),
                 torch.randn(1, n, MLP, device=dev, dtype=bf, requires_grad=True)], lambda a, b: torch.cat([a, b], 2)))


def matmuls(res):
    ni = (res // 16) ** 2
    n = ni + NTXT
    print(f"\n== matmuls (frozen weight: input gradient only), M = {ni} / {n}", flush=True)
    for m, outs, label in [(ni, [D, D, D], "double img q,k,v"), (n, [D, D, D, MLP], "single q,k,v,mlp")]:
        ws = [torch.randn(o, D, device=dev, dtype=bf) * 0.02 for o in outs]
        wcat = torch.cat(ws, 0)
        mk = lambda: [torch.randn(m, D, device=dev, dtype=bf, requires_grad=True)]  # noqa: E731
        sep = bench_fwd_bwd(mk, lambda x: torch.cat([F.linear(x, w) for w in ws], 1))
        sep_nocat = bench_fwd_bwd(mk, lambda x: sum(F.linear(x, w).sum() for w in ws).reshape(1, 1))
        fused = bench_fwd_bwd(mk, lambda x: F.linear(x, wcat))
        tflop = 2 * m * D * sum(outs) * 2 / 1e12  # forward and the input gradient (the weight is frozen)
        row(f"{label}: separate (+cat)", *sep)
        row(f"{label}: separate, outputs summed (no cat)", *sep_nocat)
        row(f"{label}: one matmul", *fused)
        print(f"   fwd+bwd {tflop:.2f} TFLOP: separate {tflop / sep_nocat[1] * 1e3:.0f} TFLOP/s, one {tflop / fused[1] * 1e3:.0f} TFLOP/s")


def lora(res):
    ni = (res // 16) ** 2
    r = 16
    print(f"\n== LoRA r16 on q,k,v of the image stream (M = {ni}), float32 masters cast per use as Strata does", flush=True)
    x0 = torch.randn(1, ni, D, device=dev, dtype=bf)
    ws = [torch.randn(D, D, device=dev, dtype=bf) * 0.02 for _ in range(3)]
    downs = [torch.randn(r, D, device=dev, requires_grad=True) for _ in range(3)]
    ups = [torch.randn(D, r, device=dev, requires_grad=True) for _ in range(3)]

    def strata(x):
        outs = []
        for w, a, b in zip(ws, downs, ups):
            y = F.linear(x, w)
            h = F.linear(x, a.to(bf)).reshape(-1, r)
            outs.append(torch.addmm(y.reshape(-1, D), h, b.to(bf).t()).view(y.shape))
        return torch.stack(outs)

    def fused_down(x):
        hs = F.linear(x, torch.cat(downs, 0).to(bf)).reshape(-1, 3 * r).split(r, 1)
        outs = [torch.addmm(F.linear(x, w).reshape(-1, D), h, b.to(bf).t()).view(x.shape) for w, h, b in zip(ws, hs, ups)]
        return torch.stack(outs)

    def base(x):
        return torch.stack([F.linear(x, w) for w in ws])

    mk = lambda: [x0.clone().requires_grad_(True)]  # noqa: E731
    row("base only (3 matmuls + stack)", *bench_fwd_bwd(mk, base))
    row("base + 3 LoRA (Strata's addTo)", *bench_fwd_bwd(mk, strata))
    row("base + 3 LoRA, downs as one matmul", *bench_fwd_bwd(mk, fused_down))


def kernel(res):
    ni = (res // 16) ** 2
    n = ni + NTXT
    print("\n== fused RMSNorm + rotary kernel (core/dit/cuda/DitKernels.cu)", flush=True)
    from torch.utils.cpp_extension import load_inline

    src = os.path.join(ROOT, "core/dit/cuda/DitKernels.cu")
    cpp = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include "dit/cuda/DitKernels.cuh"
using namespace strata::dit::cuda;
std::vector<at::Tensor> fwd(at::Tensor x, at::Tensor w, at::Tensor c, at::Tensor s) {
  auto out = at::empty_like(x); int64_t dim = x.size(-1); int64_t rows = x.numel() / dim;
  auto rstd = at::empty({rows}, x.options().dtype(at::kFloat));
  auto e = normRopeForward(x.data_ptr(), w.data_ptr(), c.data_ptr<float>(), s.data_ptr<float>(), out.data_ptr(),
      rstd.data_ptr<float>(), rows, x.size(2), x.size(1), dim, 1e-6, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(!e, e); return {out, rstd}; }
at::Tensor bwd(at::Tensor g, at::Tensor x, at::Tensor rstd, at::Tensor w, at::Tensor c, at::Tensor s) {
  auto gx = at::empty_like(x); int64_t dim = x.size(-1);
  auto e = normRopeBackward(g.data_ptr(), x.data_ptr(), rstd.data_ptr<float>(), w.data_ptr(), c.data_ptr<float>(),
      s.data_ptr<float>(), gx.data_ptr(), x.numel() / dim, x.size(2), x.size(1), dim,
      c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(!e, e); return gx; }
"""
    ext = load_inline("strata_flux_kernels", cpp_sources=[cpp], cuda_sources=[open(src).read()],
                      functions=["fwd", "bwd"], extra_include_paths=[os.path.join(ROOT, "core")],
                      extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"], verbose=False)

    class NormRope(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, c, s):
            out, rstd = ext.fwd(x, w, c, s)
            ctx.save_for_backward(x, rstd, w, c, s)
            return out

        @staticmethod
        def backward(ctx, g):
            x, rstd, w, c, s = ctx.saved_tensors
            return ext.bwd(g.contiguous(), x, rstd, w, c, s), None, None, None

    def unfused_frozen(x, w, c, s):
        # Strata's FrozenRmsNorm backward (float32 n), then the rotary through autograd
        return rotary_ref(rms_norm_ref(x, w), c, s)

    for (b, nn, dh) in [(1, n, DH), (2, 77, 64), (1, 33, 256), (3, 5, 2)]:
        c, s = rope_tables(nn, dh)
        w = (1 + 0.1 * torch.randn(dh, device=dev)).to(bf)
        x = torch.randn(b, nn, 3 if dh != DH else H, dh, device=dev, dtype=bf) * 3
        xr = x.clone().requires_grad_(True)
        xk = x.clone().requires_grad_(True)
        ref = unfused_frozen(xr, w, c, s)
        out = NormRope.apply(xk, w, c, s)
        g = torch.randn_like(ref)
        ref.backward(g)
        out.backward(g)
        # float64 reference of the same function for the gradient
        x64 = x.double().requires_grad_(True)
        y64 = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
        p = y64.unflatten(-1, (dh // 2, 2))
        r64 = torch.stack([-p[..., 1], p[..., 0]], -1).flatten(-2)
        o64 = y64 * c.double()[None, :, None] + r64 * s.double()[None, :, None]
        o64.backward(g.double())
        same = (out == ref).float().mean().item()
        print(f"shape {tuple(x.shape)}: out vs unfused rel L2 {rel(out, ref):.2e} (bit-equal {100 * same:.2f}%), "
              f"grad x vs unfused {rel(xk.grad, xr.grad):.2e}; vs float64: unfused out {rel(ref, o64):.2e} "
              f"kernel out {rel(out, o64):.2e}, unfused grad {rel(xr.grad, x64.grad):.2e} kernel grad "
              f"{rel(xk.grad, x64.grad):.2e}; NaN {bool(torch.isnan(out).any() or torch.isnan(xk.grad).any())}",
              flush=True)
    c, s = rope_tables(n)
    w = (1 + 0.1 * torch.randn(DH, device=dev)).to(bf)
    mk = lambda: [torch.randn(1, n, H, DH, device=dev, dtype=bf, requires_grad=True)]  # noqa: E731
    row("unfused frozen rmsnorm + rotary (ATen ops)", *bench_fwd_bwd(mk, lambda x: unfused_frozen(x, w, c, s)))
    row("fused kernel", *bench_fwd_bwd(mk, lambda x: NormRope.apply(x, w, c, s)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--res", type=int, default=1024)
    ap.add_argument("--parts", default="kernel,sdpa,elementwise,matmuls,lora")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, cuda {torch.version.cuda}, cudnn {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    torch.manual_seed(0)
    for part in a.parts.split(","):
        try:
            {"kernel": kernel, "sdpa": sdpa, "elementwise": elementwise, "matmuls": matmuls, "lora": lora}[part](a.res)
        except Exception as e:  # noqa: BLE001 - one part failing must not hide the others
            print(f"part {part} failed: {type(e).__name__}: {str(e)[:2000]}", flush=True)
    if a.res == 1024:
        sdpa(512)


if __name__ == "__main__":
    sys.exit(main())
