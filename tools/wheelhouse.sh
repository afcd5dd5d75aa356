#!/usr/bin/env bash
# Print the wheelhouse folder for the CPU variant (`make run`/`make test` pass it to tools/matrix).
# PIP_FIND_LINKS (or pip's own configuration) names one already (as on this project's CI machines): print it. Otherwise download the torch
# wheel that matrix.yaml pins (not on PyPI: torch==2.13.0+cpu) from its index into build/wheelhouse, once.
# The pin and its index come from `tools/matrix ci-matrix`, so nothing here repeats matrix.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
# PIP_FIND_LINKS first, then the find-links pip itself is configured with (pip.conf).
configured=$(python3 -m pip config list 2>/dev/null | sed -n "s/^global\.find-links='\(.*\)'$/\1/p" || true)
for link in ${PIP_FIND_LINKS:-} $configured; do
  case "$link" in http://*|https://*) continue;; esac
  link=${link#file://}
  [ -d "$link" ] && { echo "$link"; exit 0; }
done
target=build/wheelhouse
mkdir -p "$target"
tools/matrix ci-matrix | python3 -c '
import json, sys
for entry in json.load(sys.stdin)["include"]:
    if entry["wheelhouse"]:
        print(entry["torch"], entry["wheelhouse_index"])
' | sort -u | while read -r requirement index; do
  echo "+ pip download $requirement --index-url $index" >&2
  python3 -m pip download --quiet --no-deps --only-binary=:all: --index-url "$index" -d "$target" "$requirement" >&2
done
echo "$PWD/$target"
