#!/usr/bin/env bash
# For the GPU machine (Ubuntu, LibTorch from the Python torch, CUDA, no Qt):
# builds the core, the CLI and the core tests, then runs the gpu and parity
# labels. No packages are installed here: that machine comes with them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${STRATA_BUILD_DIR:-$ROOT/build-gpu}"
TORCH_PREFIX="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')"
# A pip LibTorch ships no Gloo headers: GLOO_INCLUDE names a folder holding gloo/
# (docs/data-parallel.md, "Building"); without one the Gloo tests skip, saying so.
GLOO_INCLUDE="${GLOO_INCLUDE:-$ROOT/.carry/gloo-include}"
GLOO_ARG=()
[ -f "$GLOO_INCLUDE/gloo/context.h" ] && GLOO_ARG=(-DSTRATA_GLOO_INCLUDE="$GLOO_INCLUDE")
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_BUILD_UI=OFF \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" "${GLOO_ARG[@]}"
cmake --build "$BUILD" -j "$(nproc)"
cd "$BUILD"
ctest --output-on-failure -L "${STRATA_CTEST_LABELS:-gpu|parity|core}" "$@"
