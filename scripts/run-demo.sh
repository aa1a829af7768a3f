#!/usr/bin/env bash
# Installs what is missing, builds Strata with its desktop app, and opens the app
# on the bundled demo (configs/demo.yaml: a tiny FLUX-architecture model that
# trains on CPU in minutes).
#   scripts/run-demo.sh              the app (needs a display, or QT_QPA_PLATFORM=vnc)
#   scripts/run-demo.sh --headless   the same demo in the terminal (strata-train run)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
HEADLESS=0
if [ "${1:-}" = "--headless" ]; then
  HEADLESS=1
  shift
elif [ -z "${DISPLAY:-}${WAYLAND_DISPLAY:-}${QT_QPA_PLATFORM:-}" ]; then
  # Said before the long build, not after it in Qt's words.
  echo "run-demo: no display to open the app on (DISPLAY and WAYLAND_DISPLAY are not set). Instead:" >&2
  echo "  scripts/run-demo.sh --headless          the same demo in this terminal (strata-train run configs/demo.yaml)" >&2
  echo "  QT_QPA_PLATFORM=vnc scripts/run-demo.sh  the app over VNC: connect a VNC viewer to $(hostname):5900" >&2
  exit 2
fi
strata_install_packages
if [ "$HEADLESS" = 1 ]; then
  strata_configure_and_build
  exec "$STRATA_BUILD_DIR/app/strata-train" run "$STRATA_ROOT/configs/demo.yaml" "$@"
fi
strata_configure_and_build -DSTRATA_BUILD_UI=ON
exec "$STRATA_BUILD_DIR/app/strata" "$STRATA_ROOT/configs/demo.yaml" "$@"
