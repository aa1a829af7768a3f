#!/usr/bin/env bash
# For the GPU machine (Ubuntu, LibTorch from the Python torch, CUDA, no Qt):
# builds the core, the CLI and the core tests, then runs the gpu and parity
# labels. No packages are installed here: that machine comes with them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${STRATA_BUILD_DIR:-$ROOT/build-gpu}"
TORCH_PREFIX="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_BUILD_UI=OFF \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX"
cmake --build "$BUILD" -j "$(nproc)"
cd "$BUILD"
ctest --output-on-failure -L "${STRATA_CTEST_LABELS:-gpu|parity|core}" "$@"
