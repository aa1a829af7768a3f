#!/usr/bin/env bash
# Every C++ and CUDA file git tracks is as clang-format writes it (.clang-format
# at the root). Exit 77 (ctest: skipped, with the reason) where clang-format or
# git is missing, as on the GPU machine; CI installs clang-format
# (scripts/common.sh), so there it always runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
CLANG_FORMAT="${1:-clang-format}"
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1 || ! command -v git >/dev/null 2>&1; then
  echo "skipped: clang-format or git is not installed here"
  exit 77
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "skipped: not a git checkout, so there is no list of tracked files"
  exit 77
fi
files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(git ls-files -z -- '*.cpp' '*.h' '*.cu' '*.cuh')
if ! "$CLANG_FORMAT" --dry-run -Werror "${files[@]}"; then
  echo "format: the files above differ from clang-format's output; run: git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs $CLANG_FORMAT -i"
  exit 1
fi
echo "format: ${#files[@]} files as clang-format writes them"
