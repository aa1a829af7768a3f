#!/usr/bin/env bash
# For the GPU machine (LibTorch from the Python torch, CUDA): builds strata-train and
# the gpu tests, then runs the named parts, one right after the other, logging each to
# $OUT (default /tmp/strata-speed). Every bench runs configs/flux-dev-1gpu.yaml as it ships
# (since s27 with train.offload_optimizer_state: true) plus the part's --set lines, so rows
# from before s27 had the moments on the card (the onboard part has them there). Parts:
#   opt     the optimizer / gradient-norm check and timing (OptimizerGpu.*)
#   phases  strata-train bench --phases at 512 and 1024 px, no checkpointing
#   memory  strata-train bench --phases at 512 and 1024 px with checkpointing, peer's targets
#           (each phase's peak allocated: where the step's memory peaks)
#   probe   scripts/bench/cudnn-probe.py (which gradient layouts cuDNN attention gets wrong)
#   flash   the table's bf16 rows with model.attention_backend=flash (cuDNN's attention off;
#           the default is cudnn), peer's targets
#   strata  strata-train bench at 512/1024 px with and without checkpointing, the peer's
#           LoRA targets
#   defaults  the same four rows with Strata's default LoRA targets
#   peer    the peer, right after (scripts/bench/peer_flux.py, or PEER_SCRIPT; PEER_DIFFUSERS
#           names the folder holding diffusers' package, default .carry)
#   table   strata, defaults, then peer
#   quant   the 16 GB capped 30-step quantized run (QuantGpu.FluxDevQuantizedChecked...)
#   int8    strata-train bench of the int8 base at 1024 px with checkpointing
#   fused   strata-train bench at 1024 px without checkpointing, the peer's targets, bf16
#           and int8, with the fused paths (docs/speed.md, s21) on and then off
#           (STRATA_FUSED_PATHS=0)
#   offload the checkpointed rows with train.offload_checkpoints (block inputs in host memory)
#   adamw8bit  the memory part's benches with train.optimizer=adamw8bit (the 8-bit moments)
#   optstate   the checkpointed rows with train.offload_optimizer_state (AdamW moments in host
#           memory), peer's targets (since s27 the config's own setting: the strata part's rows)
#   onboard the four rows of strata with the moments on the card (train.offload_optimizer_state:
#           false; configs/flux-dev-1gpu.yaml keeps them in host memory)
#   fp8     1024 px without checkpointing on a qfloat8 base with model.fp8_matmul and
#           model.fp8_backward, peer's targets
#   fp8onboard  the same with the moments on the card (train.offload_optimizer_state: false)
#   fp8kept, fp8keptonboard  fp8 and fp8onboard with model.fp8_keep_transpose (the transposed
#           fp8 weights kept for the run instead of made in every backward)
#   graph   the two rows without checkpointing (512 and 1024 px) with train.cuda_graph (the
#           forward and backward recorded at step 3 and replayed), the peer's targets
#   fp8graph  fp8kept and fp8keptonboard with train.cuda_graph
#   cap16   the config as shipped with model.quantize (qfloat8, then int8) under a 16 GB cap,
#           30 steps at 1024 px with checkpointing: what `plan --devices 1x16GB` promises
#   glooshare  issue 35's reduce cost on one card: two plain `strata-train run`s sharing the card
#           against `run --nproc 2` with STRATA_DIST_BACKEND=gloo STRATA_DIST_SHARE_CARDS=1 (11
#           eager checkpointed steps at 1024 px, median of steps 5-11), the moments on the card,
#           then in host memory (GLOOSHARE_MOMENTS: "card host"), GLOOSHARE_ROUNDS rounds (default
#           1), each with its cost in %;
#           the attention kernel fixed (GLOOSHARE_ATTENTION, default cudnn:
#           `auto` would time it on a shared card). Needs a build with Gloo's headers:
#           GLOO_INCLUDE names a folder holding gloo/ (docs/data-parallel.md, "Building");
#           default .carry/gloo-include.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/strata-speed}"
mkdir -p "$OUT"
BUILD="$ROOT/build-gpu"
# The peer's protocol (bench_peer.py): 3 untimed steps, then 10 timed ones.
STEPS="${STEPS:-10}"
WARMUP="${WARMUP:-3}"
START="$(date +%s)"
TORCH_PREFIX="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')"
GLOO_INCLUDE="${GLOO_INCLUDE:-$ROOT/.carry/gloo-include}"
GLOO_ARG=()
[ -f "$GLOO_INCLUDE/gloo/context.h" ] && GLOO_ARG=(-DSTRATA_GLOO_INCLUDE="$GLOO_INCLUDE")
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_BUILD_UI=OFF \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" "${GLOO_ARG[@]}" >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
# The GPU tests only for the parts that run them (a build without tests has no such target).
TARGETS=(strata-train)
case " $* " in *" opt "*|*" quant "*) TARGETS+=(strata_tests_gpu) ;; esac
cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}" >>"$OUT/build.log" 2>&1 ||
  { grep -m5 -A5 "error" "$OUT/build.log"; exit 1; }
CLI="$(find "$BUILD" -name strata-train -type f -perm -u+x | head -1)"
TESTS="$(find "$BUILD" -name strata_tests_gpu -type f -perm -u+x | head -1)"
CFG="$ROOT/configs/flux-dev-1gpu.yaml"
PEER_TARGETS='network.target_modules=[to_q,to_k,to_v,to_out.0,add_q_proj,add_k_proj,add_v_proj,to_add_out,ff.net.0.proj,ff.net.2,ff_context.net.0.proj,ff_context.net.2,proj_mlp,proj_out]'
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$OUT/gpu.txt" 2>&1

bench() {  # name, then --set arguments
  local name="$1"; shift
  echo "== bench $name at $(( $(date +%s) - START )) s: $*" | tee -a "$OUT/bench.log"
  "$CLI" bench "$CFG" --steps "$STEPS" --warmup "$WARMUP" --json "$@" >"$OUT/bench-$name.json" 2>>"$OUT/bench.log"
  python3 - "$name" "$OUT/bench-$name.json" <<'PY' | tee -a "$OUT/bench.log"
import json, sys
try:
    j = json.load(open(sys.argv[2]))
except Exception as e:
    print(sys.argv[1], "failed:", e); sys.exit()
d = j["devices"][0]
line = (f'{sys.argv[1]}: median {j["median_step_ms"]/1000:.3f} s, min {j["min_step_ms"]/1000:.3f} s, '
        f'peak allocated {d["peak_allocated_bytes"]/2**30:.2f} GiB, reserved {d["peak_reserved_bytes"]/2**30:.2f} GiB, '
        f'graph steps {j.get("graph_steps", 0)}; steps (ms) {[round(x) for x in j["step_ms"]]}')
if "phases" in j:
    line += "; phases (ms, GiB peak inside / allocated after) " + ", ".join(
        f'{p["phase"]} {p["median_ms"]:.1f} ({p.get("peak_allocated_bytes", 0)/2**30:.2f} / {p["allocated_bytes_after"]/2**30:.2f})'
        for p in j["phases"])
    line += f'; sum {j["phases_sum_ms"]:.1f} ms'
print(line)
PY
}

# The median step of each metrics.jsonl from step 5 on, given as rounds of three (pair A,
# pair B, the Gloo ranks); then each round's cost: the Gloo ranks' median over the mean of
# the pair's.
glooshare_medians() {
  python3 - "$@" <<'PY'
import json, statistics, sys
medians = []
for f in sys.argv[1:]:
    try:
        rows = [json.loads(l) for l in open(f) if l.strip()]
        ms = [r["step_time_ms"] for r in rows if r["step"] >= 5]
        medians.append(statistics.median(ms))
        print(f"{f}: median step {medians[-1]:.1f} ms over {len(ms)} steps from 5 "
              f"(min {min(ms):.1f}, max {max(ms):.1f}); final loss {rows[-1]['loss']}")
    except Exception as e:
        medians.append(None)
        print(f, "unreadable:", e)
for i in range(0, len(medians) - 2, 3):
    a, b, g = medians[i:i + 3]
    if None in (a, b, g):
        print(f"round {i // 3 + 1}: no cost (a run unreadable)")
        continue
    print(f"round {i // 3 + 1}: Gloo ranks {g:.1f} ms against the pair's {(a + b) / 2:.1f} ms: "
          f"{100 * (g / ((a + b) / 2) - 1):+.1f}%")
PY
}

# Two plain runs sharing the card against two Gloo ranks sharing it (glooshare), in
# GLOOSHARE_ROUNDS rounds (default 1; a second round shows the noise), then each round's
# cost (glooshare_medians). The plain runs are waited for by pid: a bare `wait` would also
# wait for a caller's `exec > >(tee ...)`, which never ends.
glooshare() {  # moments: card | host
  local off=false; [ "$1" = host ] && off=true
  local r="$OUT/glooshare-$1"; rm -rf "$r"; mkdir -p "$r"
  # The attention kernel fixed: `auto` times cuDNN against flash at the first call, and on a
  # card another process is using that timing is noise, so runs would differ in kernel.
  local set=(--set train.steps=11 --set train.gradient_checkpointing=true --set train.cuda_graph=false
             --set save.save_every=100 --set "train.offload_optimizer_state=$off"
             --set "model.attention_backend=${GLOOSHARE_ATTENTION:-cudnn}")
  local files=()
  for round in $(seq 1 "${GLOOSHARE_ROUNDS:-1}"); do
    echo "== glooshare, moments on the $1, round $round, at $(( $(date +%s) - START )) s" | tee -a "$OUT/bench.log"
    timeout 300 "$CLI" run "$CFG" "${set[@]}" --run-dir "$r/pairA$round" >"$r/pairA$round.log" 2>&1 & local a=$!
    timeout 300 "$CLI" run "$CFG" "${set[@]}" --run-dir "$r/pairB$round" >"$r/pairB$round.log" 2>&1 & local b=$!
    wait "$a" "$b"
    STRATA_DIST_BACKEND=gloo STRATA_DIST_SHARE_CARDS=1 timeout 300 "$CLI" run "$CFG" "${set[@]}" \
      --run-dir "$r/gloo$round" --nproc 2 >"$r/gloo$round.log" 2>&1 ||
      echo "gloo ranks failed: $(tail -3 "$r/gloo$round.log")" | tee -a "$OUT/bench.log"
    files+=("$r/pairA$round/metrics.jsonl" "$r/pairB$round/metrics.jsonl" "$r/gloo$round/metrics.jsonl")
  done
  glooshare_medians "${files[@]}" | tee -a "$OUT/bench.log"
}

for part in "$@"; do
  case "$part" in
    opt) "$TESTS" --gtest_filter='OptimizerGpu.*' 2>&1 | tee "$OUT/opt.log" | grep -E "\[optimizer gpu\]|OK|FAILED" ;;
    phases)
      bench phases-512-nockpt --phases --set 'datasets[0].resolution=[512]' --set train.gradient_checkpointing=false
      bench phases-1024-nockpt --phases --set train.gradient_checkpointing=false ;;
    memory)
      for res in 512 1024; do
        bench "memory-$res-ckpt" --phases --set "datasets[0].resolution=[$res]" --set train.gradient_checkpointing=true --set "$PEER_TARGETS"
      done ;;
    probe) python3 "$ROOT/scripts/bench/cudnn-probe.py" 2>&1 | tee "$OUT/probe.log" ;;
    flash)
      for res in 512 1024; do for gc in false true; do
        bench "flash-$res-ckpt-$gc" --set model.attention_backend=flash --set "datasets[0].resolution=[$res]" \
          --set "train.gradient_checkpointing=$gc" --set "$PEER_TARGETS"
      done; done ;;
    strata)
      for res in 512 1024; do for gc in false true; do
        bench "peer-targets-$res-ckpt-$gc" --set "datasets[0].resolution=[$res]" --set "train.gradient_checkpointing=$gc" --set "$PEER_TARGETS"
      done; done ;;
    defaults)
      for res in 512 1024; do for gc in false true; do
        bench "default-targets-$res-ckpt-$gc" --set "datasets[0].resolution=[$res]" --set "train.gradient_checkpointing=$gc"
      done; done ;;
    peer)
      echo "== peer" | tee -a "$OUT/bench.log"
      PYTHONUNBUFFERED=1 PEER_DIFFUSERS="${PEER_DIFFUSERS:-$ROOT/.carry}" PEER_SDP=flash PEER_ONLY=512/0,1024/0,512/1,1024/1 \
        python3 "${PEER_SCRIPT:-$ROOT/scripts/bench/peer_flux.py}" 2>&1 | grep -v Warning | tee -a "$OUT/bench.log" ;;
    table) "$0" strata defaults peer ;;
    onboard)
      for res in 512 1024; do for gc in false true; do
        bench "onboard-$res-ckpt-$gc" --set "datasets[0].resolution=[$res]" --set "train.gradient_checkpointing=$gc" \
          --set train.offload_optimizer_state=false --set "$PEER_TARGETS"
      done; done ;;
    optstate)
      for res in 512 1024; do
        bench "optstate-$res-ckpt" --set "datasets[0].resolution=[$res]" --set train.gradient_checkpointing=true \
          --set train.offload_optimizer_state=true --set "$PEER_TARGETS"
      done ;;
    fp8)
      bench fp8-1024-nockpt --set train.gradient_checkpointing=false --set model.quantize=true --set model.qtype=qfloat8 \
        --set model.fp8_matmul=true --set model.fp8_backward=true --set "$PEER_TARGETS" ;;
    fp8onboard)
      bench fp8-onboard-1024-nockpt --set train.gradient_checkpointing=false --set train.offload_optimizer_state=false \
        --set model.quantize=true --set model.qtype=qfloat8 --set model.fp8_matmul=true --set model.fp8_backward=true \
        --set "$PEER_TARGETS" ;;
    fp8kept)
      bench fp8-kept-1024-nockpt --set train.gradient_checkpointing=false --set model.quantize=true \
        --set model.qtype=qfloat8 --set model.fp8_matmul=true --set model.fp8_backward=true \
        --set model.fp8_keep_transpose=true --set "$PEER_TARGETS" ;;
    fp8keptonboard)
      bench fp8-kept-onboard-1024-nockpt --set train.gradient_checkpointing=false \
        --set train.offload_optimizer_state=false --set model.quantize=true --set model.qtype=qfloat8 \
        --set model.fp8_matmul=true --set model.fp8_backward=true --set model.fp8_keep_transpose=true \
        --set "$PEER_TARGETS" ;;
    graph)
      for res in 512 1024; do
        bench "graph-$res-nockpt" --set "datasets[0].resolution=[$res]" --set train.gradient_checkpointing=false \
          --set train.cuda_graph=true --set "$PEER_TARGETS"
      done ;;
    fp8graph)
      for onboard in false true; do
        bench "fp8-kept-graph-onboard-$onboard-1024-nockpt" --set train.gradient_checkpointing=false \
          --set "train.offload_optimizer_state=$([ $onboard = true ] && echo false || echo true)" \
          --set model.quantize=true --set model.qtype=qfloat8 --set model.fp8_matmul=true \
          --set model.fp8_backward=true --set model.fp8_keep_transpose=true --set train.cuda_graph=true \
          --set "$PEER_TARGETS"
      done ;;
    cap16)
      for q in qfloat8 int8; do
        STEPS=30 bench "cap16-$q-1024-ckpt" --set model.quantize=true --set "model.qtype=$q" \
          --set 'model.gpu_memory_limit_gb=[16]'
      done ;;
    quant) "$TESTS" --gtest_filter='QuantGpu.FluxDevQuantizedCheckpointedRunAt1024UnderA16GbCap' 2>&1 |
             tee "$OUT/quant.log" | grep -E "\[quant gpu\]|OK \]|FAILED|out of memory" ;;
    fused)
      for f in 1 0; do
        STRATA_FUSED_PATHS=$f bench "fused-$f-bf16-1024-nockpt" --set train.gradient_checkpointing=false --set "$PEER_TARGETS"
        STRATA_FUSED_PATHS=$f bench "fused-$f-int8-1024-nockpt" --set train.gradient_checkpointing=false --set "$PEER_TARGETS" \
          --set model.quantize=true --set model.qtype=int8
      done ;;
    adamw8bit)
      for res in 512 1024; do
        bench "adamw8bit-$res-ckpt" --phases --set train.optimizer=adamw8bit --set "datasets[0].resolution=[$res]" \
          --set train.gradient_checkpointing=true --set "$PEER_TARGETS"
      done ;;
    offload)
      for res in 512 1024; do
        bench "offload-$res-ckpt" --set train.offload_checkpoints=true --set "datasets[0].resolution=[$res]" \
          --set train.gradient_checkpointing=true --set "$PEER_TARGETS"
      done ;;
    glooshare) for m in ${GLOOSHARE_MOMENTS:-card host}; do glooshare "$m"; done ;;
    int8) bench int8-1024-ckpt --set model.quantize=true --set model.qtype=int8 --set "$PEER_TARGETS" ;;
    *) echo "unknown part $part" ;;
  esac
done
