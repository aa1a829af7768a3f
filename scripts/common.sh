# Shared by the README commands: installs what is missing and configures/builds.
# Sourced, not run.
set -euo pipefail

STRATA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STRATA_BUILD_DIR="${STRATA_BUILD_DIR:-$STRATA_ROOT/build}"
STRATA_JOBS="${STRATA_JOBS:-$(nproc)}"

# Debian 12 packages Strata builds and tests with (DESIGN.md §4).
STRATA_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libgloo-dev libopenblas0-pthread libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libgtest-dev
  libpng-dev libjpeg-dev libwebp-dev libsentencepiece-dev
  libpcre2-dev                               # tests only: the regex engine compared with PCRE2
  qt6-base-dev libqcustomplot-dev libgl-dev xvfb xauth
  dpkg-dev file lintian desktop-file-utils   # the .deb test (tests/packaging)
  clang-format git                           # the format test (tests/format)
)

strata_install_packages() {
  local missing=()
  for pkg in "${STRATA_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "strata: all build packages are installed"
    return 0
  fi
  echo "strata: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

strata_configure_and_build() {
  cmake -S "$STRATA_ROOT" -B "$STRATA_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
  cmake --build "$STRATA_BUILD_DIR" -j "$STRATA_JOBS"
}
