#!/usr/bin/env python3
"""The floor of a FLUX.1-dev LoRA step on this card: its matmuls and attention alone.

Runs, back to back on random data, every base matmul of one training step (the forward and the
input gradient of each block Linear; the frozen weights take no gradient), the LoRA matmuls of the
peer's targets (rank 16), and each block's attention forward and backward, with the kernels
PyTorch's cuBLAS and cuDNN / flash pick. Nothing else a step needs (norms, GELU, modulation,
residual adds, the optimizer) runs, so no step on this card with these kernels can be faster than
the sum of the base matmuls and attention. Prints each part's time and rate, and the floors of
the issue-37 rows: bf16 without and with gradient checkpointing (the recompute runs each block's
forward matmuls and attention again) and the fp8 row (base matmuls on the fp8 tensor cores with per-token and per-row scales, as
model.fp8_matmul + fp8_backward do; LoRA and attention stay bf16).

Usage: python3 scripts/bench/floor-flux.py [--res 1024] [--reps 5]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

D, HEADS, DH, MLP, NTXT, RANK = 3072, 24, 128, 12288, 512, 16
DOUBLE, SINGLE = 19, 38
dev = torch.device("cuda")
bf = torch.bfloat16
e4m3 = torch.float8_e4m3fn


def timed(fn, reps, setup=None):
    """Median ms of fn over reps calls after one warm-up; setup, where given, runs before each, untimed."""
    ts = []
    for i in range(reps + 1):
        if setup:
            setup()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        if i:
            ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def linears(img):
    """(tokens, in, out, count, lora) for every block Linear of one step; lora: the peer targets it."""
    txt, both = NTXT, img + NTXT
    rows = []
    for m in (img, txt):  # a double block's image and text streams
        rows += [(m, D, 3 * D, DOUBLE, 3), (m, D, D, DOUBLE, 1), (m, D, MLP, DOUBLE, 1), (m, MLP, D, DOUBLE, 1)]
        rows.append((1, D, 6 * D, DOUBLE, 0))  # modulation
    rows += [(both, D, 3 * D + MLP, SINGLE, 4), (both, D + MLP, D, SINGLE, 1), (1, D, 3 * D, SINGLE, 0)]
    return rows


def make_bf16(rows, grad_inputs=True):
    ops_fwd, ops_bwd, flop = [], [], 0
    for m, k, n, count, _ in rows:
        x = torch.randn(m, k, device=dev, dtype=bf)
        w = torch.randn(n, k, device=dev, dtype=bf) * 0.02
        b = torch.randn(n, device=dev, dtype=bf)
        g = torch.randn(m, n, device=dev, dtype=bf)
        dx = torch.empty(m, k, device=dev, dtype=bf)
        for _ in range(count):
            ops_fwd.append(lambda x=x, w=w, b=b: F.linear(x, w, b))
            if grad_inputs and m > 1:
                ops_bwd.append(lambda g=g, w=w, dx=dx: torch.mm(g, w, out=dx))
        flop += 2 * m * k * n * count * (2 if grad_inputs and m > 1 else 1)
    return ops_fwd, ops_bwd, flop


def make_fp8(rows):
    """model.fp8_matmul + fp8_backward: per-token input scales, per-row weight scales, kept transposes."""
    ops_fwd, ops_bwd, flop = [], [], 0
    for m, k, n, count, _ in rows:
        if m == 1:
            continue  # modulations keep bf16 (one token); counted in the bf16 parts' floor
        x = (torch.randn(m, k, device=dev) * 0.5).to(e4m3)
        w = (torch.randn(n, k, device=dev) * 0.5).to(e4m3)  # stored row-major [out, in]
        wt = w.t().contiguous()  # the kept transpose [in, out]
        b = torch.randn(n, device=dev, dtype=bf)
        g = (torch.randn(m, n, device=dev) * 0.5).to(e4m3)
        sx, sw = torch.ones(m, 1, device=dev), torch.ones(1, n, device=dev)
        sg, swt = torch.ones(m, 1, device=dev), torch.ones(1, k, device=dev)
        for _ in range(count):
            ops_fwd.append(lambda x=x, w=w, b=b, sx=sx, sw=sw: torch._scaled_mm(
                x, w.t(), sx, sw, bias=b, out_dtype=bf, use_fast_accum=True))
            ops_bwd.append(lambda g=g, wt=wt, sg=sg, swt=swt: torch._scaled_mm(
                g, wt.t(), sg, swt, out_dtype=bf))
        flop += 4 * m * k * n * count
    return ops_fwd, ops_bwd, flop


def make_lora(rows):
    """Rank-16 LoRA of the peer's targets: down and up forward; dB, dh, dA and dx += dh A backward."""
    ops_fwd, ops_bwd, flop = [], [], 0
    for m, k, n, count, targets in rows:
        if targets == 0:
            continue
        out = n // targets
        x = torch.randn(m, k, device=dev, dtype=bf)
        dx = torch.randn(m, k, device=dev, dtype=bf)
        for _ in range(count * targets):
            a = torch.randn(RANK, k, device=dev, dtype=bf) * 0.01
            bu = torch.randn(out, RANK, device=dev, dtype=bf) * 0.01
            y = torch.randn(m, out, device=dev, dtype=bf)
            g = torch.randn(m, out, device=dev, dtype=bf)
            h = torch.randn(m, RANK, device=dev, dtype=bf)
            ops_fwd.append(lambda x=x, a=a, h=h: torch.mm(x, a.t(), out=h))
            ops_fwd.append(lambda h=h, bu=bu, y=y: y.addmm_(h, bu.t()))
            ops_bwd.append(lambda g=g, h=h: torch.mm(g.t(), h))
            ops_bwd.append(lambda g=g, bu=bu: torch.mm(g, bu))
            ops_bwd.append(lambda h=h, x=x: torch.mm(h.t(), x))
            ops_bwd.append(lambda dx=dx, h=h, a=a: dx.addmm_(h, a))
            flop += 2 * m * RANK * (k + out) * 3
    return ops_fwd, ops_bwd, flop


def attention_parts(tokens, backend, reps):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kind = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    q, k, v = (torch.randn(1, HEADS, tokens, DH, device=dev, dtype=bf, requires_grad=True) for _ in range(3))
    g = torch.randn(1, HEADS, tokens, DH, device=dev, dtype=bf)
    with sdpa_kernel(kind):
        def fwd():
            with torch.no_grad():
                for _ in range(DOUBLE + SINGLE):
                    F.scaled_dot_product_attention(q, k, v)

        outs = []

        def fwd_keep():
            outs.clear()
            for _ in range(DOUBLE + SINGLE):
                outs.append(F.scaled_dot_product_attention(q, k, v))

        def bwd():
            for o in outs:
                torch.autograd.grad(o, (q, k, v), g)

        t_fwd = timed(fwd, reps)
        t_bwd = timed(bwd, reps, setup=fwd_keep)
    flop_fwd = 4 * tokens * tokens * DH * HEADS * (DOUBLE + SINGLE)
    return t_fwd, t_bwd, flop_fwd


def run_all(ops):
    def go():
        for op in ops:
            op()
    return go


def say(name, ms, flop):
    rate = flop / (ms * 1e-3) / 1e12 if ms > 0 else 0
    print(f"  {name:44s} {ms:9.2f} ms  {flop / 1e12:7.2f} TFLOP  {rate:6.0f} TFLOP/s", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--res", type=int, default=1024)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    img = (args.res // 16) ** 2
    tokens = img + NTXT
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  cuDNN {torch.backends.cudnn.version()}  "
          f"{args.res} px: {img} image + {NTXT} text tokens", flush=True)
    rows = linears(img)

    f, b, flop = make_bf16(rows)
    t_f, t_b = timed(run_all(f), args.reps), timed(run_all(b), args.reps)
    fwd_flop = sum(2 * m * k * n * c for m, k, n, c, _ in rows)
    say("base matmuls, forward (bf16)", t_f, fwd_flop)
    say("base matmuls, input gradient (bf16)", t_b, flop - fwd_flop)
    del f, b

    lf, lb, lflop = make_lora(rows)
    t_lf, t_lb = timed(run_all(lf), args.reps), timed(run_all(lb), args.reps)
    say("LoRA matmuls, forward (rank 16)", t_lf, lflop / 3)
    say("LoRA matmuls, backward", t_lb, lflop * 2 / 3)
    del lf, lb

    attn = {}
    for backend in ("cudnn", "flash"):
        try:
            a_f, a_b, a_flop = attention_parts(tokens, backend, args.reps)
        except RuntimeError as e:
            print(f"  attention {backend}: not available here ({str(e).splitlines()[0]})")
            continue
        attn[backend] = (a_f, a_b)
        say(f"attention forward ({backend})", a_f, a_flop)
        say(f"attention backward ({backend})", a_b, a_flop * 2.5)
    best = min(attn.items(), key=lambda kv: kv[1][0] + kv[1][1])
    a_f, a_b = best[1]

    q8f, q8b, q8flop = make_fp8(rows)
    t_qf, t_qb = timed(run_all(q8f), args.reps), timed(run_all(q8b), args.reps)
    say("base matmuls, forward (fp8, per-token scales)", t_qf, q8flop / 2)
    say("base matmuls, input gradient (fp8)", t_qb, q8flop / 2)
    # the one-token modulations stay bf16 on the fp8 path
    mods = [r for r in rows if r[0] == 1]
    mf, _, mflop = make_bf16(mods, grad_inputs=False)
    t_mod = timed(run_all(mf), args.reps)
    del q8f, q8b, mf

    # The strict floor: the base matmuls and attention, which no LoRA step avoids. The LoRA
    # matmuls here are plain ATen calls, one per adapter; a trainer may do them faster (fused
    # siblings), so they are printed beside it, not in it.
    lora = t_lf + t_lb
    bf16 = t_f + t_b + a_f + a_b
    ckpt = bf16 + t_f + a_f
    fp8 = t_qf + t_qb + t_mod + a_f + a_b
    print(f"floor (base matmuls and attention, attention by {best[0]}); + this script's LoRA matmuls:")
    print(f"  bf16, no checkpointing   {bf16 / 1e3:.4f} s   + {lora / 1e3:.4f} s")
    print(f"  bf16, checkpointing      {ckpt / 1e3:.4f} s   + {(lora + t_lf) / 1e3:.4f} s"
          "   (the forward's matmuls and attention twice)")
    print(f"  fp8 matmuls, no ckpt     {fp8 / 1e3:.4f} s   + {lora / 1e3:.4f} s"
          f"   (the one-token modulations stay bf16: {t_mod:.2f} ms)", flush=True)


if __name__ == "__main__":
    main()
