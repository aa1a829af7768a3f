#!/usr/bin/env bash
# The .deb as a user gets it: built with CPack from this build folder, its
# contents checked (files, Depends, the desktop entry with desktop-file-validate,
# lintian with no unexplained error), then installed with dpkg and run from the
# installed path. Installing needs root: CI runs as root on a throwaway machine;
# elsewhere that last step is skipped with the reason (exit 77 = ctest "skipped")
# after the other checks have passed. The package is removed again afterwards.
#   deb_package_test.sh BUILD_DIR VERSION
set -euo pipefail
BUILD="$1"
VERSION="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in cpack dpkg-deb lintian desktop-file-validate; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/common.sh lists the packages)"
done
[ -x "$BUILD/app/strata-train" ] || fail "$BUILD/app/strata-train is not built"
WITH_UI=0
[ -x "$BUILD/app/strata" ] && WITH_UI=1

WORK="$(mktemp -d)"
INSTALLED=0
cleanup() {
  if [ "$INSTALLED" = 1 ]; then dpkg -r strata >/dev/null 2>&1 || echo "could not remove the strata package" >&2; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== cpack"
(cd "$BUILD" && cpack -G DEB -B "$WORK/out") > "$WORK/cpack.log" 2>&1 || { cat "$WORK/cpack.log"; fail "cpack"; }
DEB="$(ls "$WORK"/out/strata_*.deb 2>/dev/null | head -1)"
[ -n "$DEB" ] || { cat "$WORK/cpack.log"; fail "cpack wrote no strata_*.deb"; }
echo "$DEB ($(du -h "$DEB" | cut -f1))"

echo "== control"
dpkg-deb -I "$DEB"
[ "$(dpkg-deb -f "$DEB" Version)" = "$VERSION" ] || fail "Version is not $VERSION"
DEPENDS="$(dpkg-deb -f "$DEB" Depends)"
expect_dep() { grep -q "$1" <<<"$DEPENDS" || fail "Depends has no $1: $DEPENDS"; }
expect_dep libtorch1.13
expect_dep libyaml-cpp
expect_dep libopenblas0-pthread
if [ "$WITH_UI" = 1 ]; then
  expect_dep libqt6widgets6
  expect_dep qt6-qpa-plugins
fi

echo "== contents"
dpkg-deb -c "$DEB" | awk '{print $6}' > "$WORK/files"
expect_file() { grep -qx "./$1" "$WORK/files" || fail "the package has no /$1"; }
expect_file usr/bin/strata-train
expect_file usr/share/man/man1/strata-train.1.gz
expect_file usr/share/strata/configs/demo.yaml
expect_file usr/share/strata/configs/flux-dev-split-4x16gb.yaml
expect_file usr/share/doc/strata/copyright
expect_file usr/share/doc/strata/changelog.gz
if [ "$WITH_UI" = 1 ]; then
  expect_file usr/bin/strata
  expect_file usr/share/man/man1/strata.1.gz
  expect_file usr/share/applications/strata.desktop
  expect_file usr/share/icons/hicolor/scalable/apps/strata.svg
fi
dpkg-deb -x "$DEB" "$WORK/root"
if [ "$WITH_UI" = 1 ]; then
  desktop-file-validate "$WORK/root/usr/share/applications/strata.desktop" || fail "desktop-file-validate"
  echo "desktop entry: valid"
fi
# The unpacked program runs before anything is installed (its libraries are the system's).
"$WORK/root/usr/bin/strata-train" --version

echo "== lintian"
# Errors fail the test; every tag that does not apply is overridden, with the
# reason, in packaging/lintian-overrides (installed with the package).
lintian --fail-on error --display-info "$DEB" || fail "lintian reported errors (above)"

echo "== install"
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIPPED the install step: dpkg -i needs root (CI runs as root); the other checks passed"
  exit 77
fi
if dpkg-query -W -f='${Status}' strata 2>/dev/null | grep -q "install ok installed"; then
  echo "SKIPPED the install step: a strata package is installed already, and this test leaves it alone"
  exit 77
fi
dpkg -i "$DEB" || fail "dpkg -i (a dependency missing on this machine is named above)"
INSTALLED=1
OUT="$(/usr/bin/strata-train --version)"
echo "$OUT"
[ "$OUT" = "strata-train $VERSION" ] || fail "/usr/bin/strata-train --version printed '$OUT'"
/usr/bin/strata-train validate /usr/share/strata/configs/demo.yaml || fail "the installed demo config does not validate"
if [ "$WITH_UI" = 1 ]; then
  [ -x /usr/bin/strata ] || fail "/usr/bin/strata is not installed"
  env -u DISPLAY -u WAYLAND_DISPLAY -u QT_QPA_PLATFORM /usr/bin/strata --version >/dev/null 2>&1 ||
    fail "/usr/bin/strata --version"
fi
# The installed programs train the installed demo, the app through its own widgets.
"$(dirname "${BASH_SOURCE[0]}")/../apps/train_installed_binaries.sh" /usr/bin /usr/share/strata/configs \
  "$([ "$WITH_UI" = 1 ] && echo app || echo no-app)" || fail "the installed programs did not train the demo"
echo "installed and ran from /usr/bin: ok"
