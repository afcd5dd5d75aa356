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
set -f  # PIP_FIND_LINKS is split on blanks as pip splits it, never glob-expanded
usage='usage: tools/wheelhouse.sh [--print-command] [VARIANT...]'
print=0
variants=()
for arg in "$@"; do
  case "$arg" in
    --print-command) print=1;;
    -h|--help) echo "$usage"; exit 0;;
    -*) printf 'wheelhouse.sh: unknown option %s\n%s\n' "$arg" "$usage" >&2; exit 2;;
    *) variants+=("$arg");;
  esac
done
caller=$PWD
cd "$(dirname "$0")/.."
target=build/wheelhouse
# Every VARIANT is checked first, whatever happens next: a bad one gives ci-matrix's message and exit code.
matrix=$(tools/matrix ci-matrix "${variants[@]}")
if [ "$print" = 0 ]; then
  # PIP_FIND_LINKS first, then the find-links pip itself is configured with (pip.conf); a relative folder is the
  # caller's, printed absolute.
  configured=$(python3 -m pip config list 2>/dev/null | sed -n "s/^global\.find-links='\(.*\)'$/\1/p" || true)
  for link in ${PIP_FIND_LINKS:-} $configured; do
    case "$link" in http://*|https://*) continue;; esac
    link=${link#file://}
    case "$link" in /*) ;; *) link=$caller/$link;; esac
    [ -d "$link" ] && { (cd "$link" && pwd); exit 0; }
  done
  mkdir -p "$target"
fi
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
