#!/usr/bin/env bash
# Takes a screenshot of each view of the app with real data: runs `strata` under
# Xvfb on the demo config with a short run; the app grabs its own window
# (QWidget::grab, --screenshot-dir) at each step: setup, a planned split on four
# simulated 16 GB cards, a config error, the live run, the finished run, the
# sample grid and a side-by-side comparison. Output: docs/screenshots/*.png.
#   scripts/screenshots.sh [--steps N] [--out DIR]
# Uses $STRATA_BUILD_DIR/app/strata (default build/); builds it when missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${STRATA_BUILD_DIR:-$ROOT/build}"
OUT="$ROOT/docs/screenshots"
STEPS=1500  # the whole demo: the sample grid shows noise turning into the prompts
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--out DIR]" >&2; exit 2 ;;
  esac
done

if [ ! -x "$BUILD/app/strata" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DSTRATA_BUILD_UI=ON
  cmake --build "$BUILD" --target strata -j "$(nproc)"
fi
command -v xvfb-run >/dev/null || { echo "screenshots: xvfb-run not found (apt-get install xvfb xauth)" >&2; exit 1; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# The demo writes its run folder under its training_folder; keep it out of the tree.
sed "s|^\(\s*training_folder:\).*|\1 $WORK/runs|" "$ROOT/configs/demo.yaml" > "$WORK/demo.yaml"
mkdir -p "$OUT"
cd "$WORK"
xvfb-run -a -s "-screen 0 1600x1000x24" \
  "$BUILD/app/strata" "$WORK/demo.yaml" --settings "$WORK/settings.ini" --steps "$STEPS" \
  --screenshot-dir "$OUT" --screenshot-plan-config "$ROOT/configs/flux-dev-split-4x16gb.yaml"
ls -l "$OUT"/*.png
