#!/usr/bin/env python3
"""Which op launched each kernel of a kineto trace (`strata-train bench --profile FILE`).

Kernels are joined to the host call that launched them by the trace's correlation ids,
and each launch to the ops open around it on its host thread: the innermost ATen op, the
autograd node it ran under ("evaluate_function: AddBackward0", or "forward"), and the
innermost Strata range. Prints device time and launches per (kernel kind, op, node),
largest first, for the kernel kinds named by --match (substrings of the kernel name).
An eager step's trace says where the small kernels come from; a replayed graph's does not
(its kernels come from one graph launch).

usage: trace-kernel-owners.py TRACE.json [--match add,mul,copy] [--top 40] [--steps N]
"""
import argparse
import bisect
import collections
import json
import sys


def short_kernel(name):
    for key, label in (("CUDAFunctorOnSelf_add", "add_ in place"), ("CUDAFunctor_add", "add"),
                       ("MulFunctor", "mul"), ("addcmul", "addcmul"), ("copy_kernel", "copy/cast"),
                       ("GeluBackward", "gelu backward"), ("Gelu", "gelu"), ("CatArray", "cat"),
                       ("Memset", "memset"), ("Memcpy", "memcpy"), ("layer_norm", "layer norm"),
                       ("reduce_kernel", "reduce"), ("nvjet", "gemm"), ("gemm", "gemm")):
        if key in name:
            dtype = "bf16" if "BFloat16" in name else ("float" if "<float>" in name or "float>" in name else "")
            return (label + " " + dtype).strip()
    return name[:60]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--match", default="add,mul,copy,Gelu,addcmul,Memset,CatArray,reduce_kernel,layer_norm")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--steps", type=int, default=1, help="profiled steps: figures are per step")
    a = ap.parse_args()
    try:
        with open(a.trace) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"{a.trace}: not a kineto trace ({e})")
    matches = [m for m in a.match.split(",") if m]

    ops_by_thread = collections.defaultdict(list)  # tid -> [(ts, end, name)]
    launches = {}  # correlation -> (tid, ts)
    kernels = []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        if cat in ("cpu_op", "user_annotation"):
            ops_by_thread[e["tid"]].append((e["ts"], e["ts"] + e.get("dur", 0), e["name"]))
        elif cat in ("cuda_runtime", "cuda_driver"):
            c = e.get("args", {}).get("correlation")
            if c is not None:
                launches[c] = (e["tid"], e["ts"])
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels.append(e)

    # Per thread, the ops sorted by start; an op encloses a launch when it starts before it and
    # ends after it. Ops nest on a thread, so the enclosing ones are found walking back.
    starts = {}
    for tid, ops in ops_by_thread.items():
        ops.sort()
        starts[tid] = [o[0] for o in ops]

    def owners(tid, ts):
        ops = ops_by_thread.get(tid, [])
        i = bisect.bisect_right(starts.get(tid, []), ts) - 1
        aten = node = scope = None
        depth = 0
        while i >= 0 and depth < 4000:
            s, end, name = ops[i]
            if end >= ts:
                if aten is None and name.startswith("aten::"):
                    aten = name
                if node is None and name.startswith("autograd::engine::evaluate_function"):
                    node = name.split(": ", 1)[-1]
                if scope is None and name.startswith("strata::"):
                    scope = name
            i -= 1
            depth += 1
        return aten or "-", node or "forward", scope or "-"

    totals = collections.defaultdict(lambda: [0.0, 0])
    unmatched = 0
    for k in kernels:
        if not any(m in k["name"] for m in matches):
            continue
        c = k.get("args", {}).get("correlation")
        if c not in launches:
            unmatched += 1
            continue
        tid, ts = launches[c]
        key = (short_kernel(k["name"]),) + owners(tid, ts)
        totals[key][0] += k.get("dur", 0) / 1000.0
        totals[key][1] += 1
    rows = sorted(totals.items(), key=lambda kv: -kv[1][0])
    print(f"{'ms/step':>9} {'launches':>8}  kernel | op | autograd node | strata range")
    for (kind, aten, node, scope), (ms, n) in rows[: a.top]:
        print(f"{ms / a.steps:9.3f} {n / a.steps:8.0f}  {kind} | {aten} | {node} | {scope}")
    total_ms = sum(v[0] for v in totals.values()) / a.steps
    print(f"{total_ms:9.3f} ms a step in the matched kernels; {unmatched} kernels without a host launch "
          "(a replayed graph's)")


if __name__ == "__main__":
    main()
