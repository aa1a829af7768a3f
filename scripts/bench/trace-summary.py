#!/usr/bin/env python3
"""Where a profiled training step's time goes, from a `strata-train bench --profile FILE` trace.

The trainer marks its phases as profiler user scopes (strata::zero_grad, strata::data_and_forward,
strata::forward, strata::backward, strata::clip, strata::optimizer). Per scope this prints its wall
time, the CUDA runtime calls made inside it (by any thread: the backward launches from autograd's
device threads), the device time of the kernels those calls launched, and how long the GPU sat idle
inside the scope. Then the step's largest GPU idle gaps, each with the scope and the CPU op that ran
when it opened, and the runtime calls that took the most time over the whole trace.

  python3 scripts/bench/trace-summary.py TRACE.json [--gaps N]

With --owners, instead: which host op launched each small kernel. Kernels are joined to their
launch by the trace's correlation ids, and each launch to the ops open around it on its thread:
the innermost ATen op, the autograd node it ran under ("AddBackward0", or "forward") and the
innermost Strata range; device time and launches per (kernel kind, op, node), largest first, for
the kinds of kernel --kinds names (the small ones by default). An eager step's trace says where the
small kernels come from; a replayed graph's does not (its kernels come from one graph launch).

  python3 scripts/bench/trace-summary.py TRACE.json --owners [--kinds add,mul,gelu] [--top 40] [--steps N]
"""
import argparse
import bisect
import collections
import json
import sys

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver"}


def merged(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def busy_within(busy, starts, s, e):
    """Microseconds of the merged intervals `busy` (start-sorted, `starts` their starts) inside [s, e)."""
    total = 0.0
    i = max(bisect.bisect_right(starts, s) - 1, 0)
    while i < len(busy) and busy[i][0] < e:
        total += max(0.0, min(e, busy[i][1]) - max(s, busy[i][0]))
        i += 1
    return total


OWNED_KINDS = (("CUDAFunctorOnSelf_add", "add_ in place"), ("CUDAFunctor_add", "add"), ("MulFunctor", "mul"),
               ("addcmul", "addcmul"), ("copy_kernel", "copy/cast"), ("GeluBackward", "gelu backward"),
               ("Gelu", "gelu"), ("CatArray", "cat"), ("Memset", "memset"), ("Memcpy", "memcpy"),
               ("layer_norm", "layer norm"), ("splitKreduce", "gemm"), ("reduce_kernel", "reduce"),
               ("nvjet", "gemm"), ("gemm", "gemm"))


def kernel_kind(name):
    """(kind, label): the kind from OWNED_KINDS ("other" if none), the label with its dtype."""
    for key, kind in OWNED_KINDS:
        if key in name:
            dtype = "bf16" if "BFloat16" in name else ("float" if "<float" in name else "")
            return kind, f"{kind} {dtype}".strip()
    return "other", name[:60]


def print_owners(xs, gpu, kinds, top, steps):
    ops_by_thread = collections.defaultdict(list)  # tid -> [(start, end, name)], sorted by start
    for e in xs:
        if e.get("cat") in ("cpu_op", "user_annotation"):
            ops_by_thread[e["tid"]].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    starts = {}
    for tid, ops in ops_by_thread.items():
        ops.sort()
        starts[tid] = [o[0] for o in ops]
    launch = {e["args"]["correlation"]: (e["tid"], e["ts"]) for e in xs
              if e.get("cat") in RUNTIME_CATS and "correlation" in e.get("args", {})}

    def owners(tid, t):
        # Ops nest on a thread: walking back from the last op that started before t, those
        # still open at t enclose it, innermost first (a bounded walk).
        ops = ops_by_thread.get(tid, [])
        aten = node = scope = None
        last = bisect.bisect_right(starts.get(tid, []), t) - 1
        for j in range(last, max(-1, last - 4000), -1):
            s, e, name = ops[j]
            if e < t:
                continue
            if aten is None and name.startswith("aten::"):
                aten = name
            if node is None and name.startswith("autograd::engine::evaluate_function"):
                node = name.split(": ", 1)[-1]
            if scope is None and name.startswith("strata::"):
                scope = name
        return aten or "-", node or "forward", scope or "-"

    totals = collections.defaultdict(lambda: [0.0, 0])
    unlaunched = 0
    for k in gpu:
        kind, label = kernel_kind(k["name"])
        if "all" not in kinds and kind.split()[0].split("/")[0] not in kinds:
            continue
        corr = k.get("args", {}).get("correlation")
        if corr not in launch:
            unlaunched += 1
            continue
        key = (label,) + owners(*launch[corr])
        totals[key][0] += k["dur"] / 1e3
        totals[key][1] += 1
    print(f"{'ms/step':>9} {'launches':>8}  kernel | op | autograd node | strata range")
    for (kind, aten, node, scope), (ms, n) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{ms / steps:9.3f} {n / steps:8.1f}  {kind} | {aten} | {node} | {scope}")
    print(f"{sum(v[0] for v in totals.values()) / steps:9.3f} ms a step in these kinds of kernel; {unlaunched} of them "
          "without a host launch (a replayed graph's)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--gaps", type=int, default=12, help="how many of the largest GPU idle gaps to list")
    ap.add_argument("--owners", action="store_true", help="which host op launched each small kernel (above)")
    ap.add_argument("--kinds", default="add,add_,mul,addcmul,copy,gelu,cat,memset,memcpy,layer,reduce",
                    help="with --owners: the kinds of kernel to list (first words of OWNED_KINDS' labels: "
                         "gemm, other, or all)")
    ap.add_argument("--top", type=int, default=40, help="with --owners: how many rows")
    ap.add_argument("--steps", type=int, default=1, help="with --owners: profiled steps (figures are per step)")
    args = ap.parse_args()
    try:
        with open(args.trace) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"{args.trace}: not a readable chrome trace ({e})")
    xs = [e for e in events if e.get("ph") == "X" and "dur" in e]
    gpu = [e for e in xs if e.get("cat") in GPU_CATS]
    runtime = sorted((e for e in xs if e.get("cat") in RUNTIME_CATS), key=lambda e: e["ts"])
    if args.owners:
        if not gpu:
            sys.exit(f"{args.trace}: no device kernels (was it a CUDA bench --profile trace?)")
        print_owners(xs, gpu, {k for k in args.kinds.split(",") if k}, args.top, max(args.steps, 1))
        return
    cpu_ops = sorted((e for e in xs if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    scopes = sorted((e for e in xs if e.get("cat") == "user_annotation" and e["name"].startswith("strata::")),
                    key=lambda e: e["ts"])
    if not gpu or not scopes:
        sys.exit(f"{args.trace}: no device kernels or no strata:: scopes (was it a CUDA bench --profile trace?)")
    by_corr = {e["args"].get("correlation"): e for e in gpu if "args" in e}
    busy = merged([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    starts = [b[0] for b in busy]
    rt_ts = [r["ts"] for r in runtime]

    print(f"{'scope':28s} {'wall ms':>9s} {'calls':>6s} {'runtime ms':>10s} {'kernels':>8s} {'kernel ms':>9s} "
          f"{'gpu idle ms':>11s}  largest runtime calls")
    for sc in scopes:
        s, e = sc["ts"], sc["ts"] + sc["dur"]
        calls = runtime[bisect.bisect_left(rt_ts, s):bisect.bisect_left(rt_ts, e)]
        per_api = collections.Counter()
        for c in calls:
            per_api[c["name"]] += c["dur"]
        launched = [by_corr[c["args"]["correlation"]] for c in calls
                    if "args" in c and c["args"].get("correlation") in by_corr]
        kernel_ms = sum(k["dur"] for k in launched) / 1e3
        idle_ms = (e - s - busy_within(busy, starts, s, e)) / 1e3
        top = ", ".join(f"{n} {d / 1e3:.2f}" for n, d in per_api.most_common(3))
        print(f"{sc['name']:28s} {sc['dur'] / 1e3:9.2f} {len(calls):6d} {sum(per_api.values()) / 1e3:10.2f} "
              f"{len(launched):8d} {kernel_ms:9.2f} {idle_ms:11.2f}  {top}")

    t0, t1 = scopes[0]["ts"], max(sc["ts"] + sc["dur"] for sc in scopes)
    last_kernel = max(b[1] for b in busy)
    t1 = max(t1, last_kernel)
    gaps = [(busy[i + 1][0] - busy[i][1], busy[i][1]) for i in range(len(busy) - 1)
            if t0 <= busy[i][1] < t1]
    idle = sum(g for g, _ in gaps)
    print(f"\nprofiled span {(t1 - t0) / 1e3:.2f} ms from the first scope to the last kernel; GPU idle "
          f"{idle / 1e3:.2f} ms in {len(gaps)} gaps between kernels")

    cpu_ts = [c["ts"] for c in cpu_ops]

    def innermost_op(t):
        best = None
        i = bisect.bisect_right(cpu_ts, t) - 1
        # look back a bounded number of ops for the innermost one covering t
        for j in range(i, max(i - 400, -1), -1):
            c = cpu_ops[j]
            if c["ts"] <= t < c["ts"] + c["dur"] and (best is None or c["dur"] < best["dur"]):
                best = c
        return best["name"] if best else "-"

    def scope_at(t):
        inner = [sc for sc in scopes if sc["ts"] <= t < sc["ts"] + sc["dur"]]
        return min(inner, key=lambda sc: sc["dur"])["name"] if inner else "(between scopes)"

    print(f"largest {args.gaps} gaps (ms, where):")
    for g, at in sorted(gaps, reverse=True)[:args.gaps]:
        print(f"  {g / 1e3:7.3f}  {scope_at(at):28s} {innermost_op(at)}")

    per_api = collections.Counter()
    counts = collections.Counter()
    for r in runtime:
        if t0 <= r["ts"] < t1:
            per_api[r["name"]] += r["dur"]
            counts[r["name"]] += 1
    print("runtime calls in the span (ms, count):")
    for n, d in per_api.most_common(10):
        print(f"  {d / 1e3:9.2f} {counts[n]:7d}  {n}")

    ops = collections.Counter()
    for sc in scopes:
        if sc["name"] not in ("strata::clip", "strata::zero_grad", "strata::optimizer"):
            continue
        s, e = sc["ts"], sc["ts"] + sc["dur"]
        for c in cpu_ops[bisect.bisect_left(cpu_ts, s):bisect.bisect_left(cpu_ts, e)]:
            ops[(sc["name"], c["name"])] += c["dur"]
    print("CPU ops inside clip / zero_grad / optimizer (inclusive ms):")
    for (sc, n), d in sorted(ops.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {d / 1e3:8.2f}  {sc:20s} {n}")


if __name__ == "__main__":
    main()
