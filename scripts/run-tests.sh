#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs the whole test suite.
# Tests labelled `gpu` skip (with the reason) where no CUDA device exists; `gui`
# tests run on Qt's offscreen platform, so no display is needed.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
strata_install_packages
strata_configure_and_build -DSTRATA_BUILD_UI=ON
export QT_QPA_PLATFORM=offscreen
cd "$STRATA_BUILD_DIR"
ctest --output-on-failure -j "$STRATA_JOBS" --timeout 900 "$@"
