#!/usr/bin/env python3
"""Which attention-output gradient layouts cuDNN's scaled-dot-product backward gets wrong.

Why: with `model.attention_backend: cudnn` every quantized-base run failed on the H200 (non-finite
gradients, then an illegal memory access) while every bf16-base run trained; flash trained both
(docs/design.md). The one layout difference known between the two is that a quantized base
concatenated [attention, MLP] before the single block's proj_out, so the gradient reaching the
attention was a strided narrow of the concatenation's gradient. This script feeds cuDNN and flash
the same inputs with each gradient layout, at FLUX.1-dev's head shape, and prints whether cuDNN's
dq/dk/dv are finite and how far they are from flash's. Each case runs in its own process (an
illegal memory access ends the process). Usage on the GPU machine (PyTorch there):
    python3 scripts/bench/cudnn-probe.py            # every case at 1536 and 4608 tokens
    python3 scripts/bench/cudnn-probe.py CASE N     # one case, N tokens
"""
import subprocess
import sys

CASES = {
    "contiguous": "the gradient of a contiguous [B, N, H*Dh] output (bf16 base, double block)",
    "narrow": "text/image narrows of the output, as the double block's to_add_out / to_out read it",
    "cat": "the output concatenated with the MLP, as a quantized single block did before proj_out",
    "strided": "dO handed to the backward with strides unlike O's",
}


def run_case(case, n):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, h, dh = 1, 24, 128
    def inputs():
        g = torch.Generator(device="cuda").manual_seed(1)
        make = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
        q, k, v = [make(b, n, h, dh).requires_grad_() for _ in range(3)]
        return q, k, v, make(b, n, 4 * h * dh), make(b, n, 5 * h * dh)

    def grads(backend):
        q, k, v, mlp, gy = inputs()
        with sdpa_kernel([backend]):
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            a = o.transpose(1, 2).flatten(2)  # [B, N, H*Dh]
            if case == "contiguous":
                (a * gy[..., : h * dh]).sum().backward()
            elif case == "narrow":
                t = min(512, n // 2)
                ((a.narrow(1, 0, t) * gy[:, :t, : h * dh]).sum() + (a.narrow(1, t, n - t) * gy[:, t:, : h * dh]).sum()).backward()
            elif case == "cat":
                (torch.cat([a, mlp], -1) * gy).sum().backward()
            elif case == "strided":
                o.backward(gy[..., : h * dh].unflatten(-1, (h, dh)).transpose(1, 2))
        torch.cuda.synchronize()
        return [t.grad.float() for t in (q, k, v)]

    ref = grads(SDPBackend.FLASH_ATTENTION)
    got = grads(SDPBackend.CUDNN_ATTENTION)
    for name, r, g in zip("qkv", ref, got):
        err = ((g - r).norm() / r.norm()).item()
        print(f"{case:10s} N={n}: d{name} finite={bool(torch.isfinite(g).all())} rel L2 vs flash {err:.3e}", flush=True)


def main():
    if len(sys.argv) == 3:
        run_case(sys.argv[1], int(sys.argv[2]))
        return
    import torch
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    for case, what in CASES.items():
        print(f"# {case}: {what}")
        for n in (1536, 4608):
            r = subprocess.run([sys.executable, __file__, case, str(n)], capture_output=True, text=True, timeout=120)
            lines = [l for l in (r.stdout + r.stderr).splitlines() if "Warning" not in l]
            print("\n".join(lines[-3:]) if r.returncode == 0 else f"{case:10s} N={n}: FAILED (exit {r.returncode}) {lines[-1:]}")


if __name__ == "__main__":
    main()
