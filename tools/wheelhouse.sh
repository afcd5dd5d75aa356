#!/usr/bin/env bash
# Print the wheelhouse folder for the wheelhouse variants (`make run`/`make test` pass it to tools/matrix).
# Usage: tools/wheelhouse.sh [--print-command] [VARIANT…]   (no VARIANT: every wheelhouse variant of matrix.yaml)
# PIP_FIND_LINKS (or pip's own configuration) names one already (as on this project's CI machines): print it. Otherwise
# download the torch wheel that matrix.yaml pins (not on PyPI: torch==2.13.0+cpu) from its index into
# build/wheelhouse, once per variant x platform: for the variant's Python and platform (`--python-version`,
# `--platform`), not the host's, so a host whose python3 is another version still gets the wheel the build installs.
# The pin, its index, the Python and the platform tag come from `tools/matrix ci-matrix`, so nothing here repeats
# matrix.yaml. --print-command: print the pip command lines (one a line, shell-quoted) and download nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
print=0
if [ "${1:-}" = --print-command ]; then print=1; shift; fi
target=build/wheelhouse
if [ "$print" = 0 ]; then
  # PIP_FIND_LINKS first, then the find-links pip itself is configured with (pip.conf).
  configured=$(python3 -m pip config list 2>/dev/null | sed -n "s/^global\.find-links='\(.*\)'$/\1/p" || true)
  for link in ${PIP_FIND_LINKS:-} $configured; do
    case "$link" in http://*|https://*) continue;; esac
    link=${link#file://}
    [ -d "$link" ] && { echo "$link"; exit 0; }
  done
  mkdir -p "$target"
fi
matrix=$(tools/matrix ci-matrix "$@")  # a bad VARIANT: its message and exit code, nothing downloaded
entries=$(python3 -c '
import json, sys
for entry in json.load(sys.stdin)["include"]:
    if entry["wheelhouse"]:
        print(entry["torch"], entry["wheelhouse_index"], entry["python"], entry["wheel_platform"])
' <<< "$matrix" | sort -u)
while read -r requirement index python platform; do
  [ -n "$requirement" ] || continue
  # With --platform/--python-version pip needs --only-binary=:all: (or --no-deps); both are given.
  cmd=(python3 -m pip download --quiet --no-deps --only-binary=:all: --index-url "$index"
    --python-version "$python" --platform "$platform" --implementation cp --abi "cp${python/./}"
    -d "$PWD/$target" "$requirement")
  if [ "$print" = 1 ]; then
    printf '%q ' "${cmd[@]}" | sed 's/ $//'
    echo
    continue
  fi
  echo "+ pip download $requirement --index-url $index --python-version $python --platform $platform" >&2
  "${cmd[@]}" >&2
done <<< "$entries"
[ "$print" = 1 ] || echo "$PWD/$target"
