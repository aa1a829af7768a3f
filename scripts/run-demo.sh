#!/usr/bin/env bash
# Installs what is missing, builds Strata with its desktop app, and opens the app
# on the bundled demo (configs/demo.yaml: a tiny FLUX-architecture model that
# trains on CPU in minutes).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
strata_install_packages
strata_configure_and_build -DSTRATA_BUILD_UI=ON
exec "$STRATA_BUILD_DIR/app/strata" "$STRATA_ROOT/configs/demo.yaml" "$@"
