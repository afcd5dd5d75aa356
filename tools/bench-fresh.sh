#!/usr/bin/env bash
# `make bench-fresh`: "fresh machine -> `make run` green", timed. A fresh Debian 12 machine is a container of the
# bookworm base this engine has (the debootstrap stand-in `tools/matrix` makes, or the real image), with its own
# dockerd on a volume of its own (nothing of this machine's images or BuildKit cache), the packages every machine
# here starts with (python3, make, git) and this machine's own apt, pip and CA settings (the TLS-intercepting proxy
# needs them; the torch wheel's folder, PIP_FIND_LINKS, is mounted read-only as on a fresh machine). A clean clone
# of HEAD (committed work only) runs `make run` in it. Prints the wall seconds and the slowest steps; writes
# build/bench/fresh.log (each line with the second it came at) and build/bench/fresh.json.
#
# The nested engine needs almost every capability: every one but CAP_SYS_RESOURCE (these machines run without it,
# so the engine cannot grant it and refuses `--privileged` with "unable to apply caps"), seccomp and the masked
# /proc paths unconfined, the host's cgroup tree writable (cgroup v1 here). That is as much power over this machine
# as `--privileged` gives: run it only where you are root anyway (the CI machine). Everything it made (container,
# volume, clone) is removed on the way out, Ctrl-C and SIGTERM included; the nested engine removes its own
# containers' cgroups when `make run` ends (a run killed in the middle may leave empty ones under docker/).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
base=${FRESH_BASE:-debian:bookworm-slim}
name=vllm-matrix-fresh-$$-$RANDOM
out=$repo/build/bench
mkdir -p "$out"
scratch=$(mktemp -d)
cleanup() {
  docker rm -f "$name" >/dev/null 2>&1 || true
  docker volume rm -f "$name-engine" >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

docker image inspect "$base" >/dev/null 2>&1 || {
  printf 'bench-fresh: no image %s on this engine; run `tools/matrix build cpu` once (it makes the stand-in base)\n' "$base" >&2
  exit 2
}
git clone -q "$repo" "$scratch/repo"
git -C "$scratch/repo" log -1 --format='commit %h %s' | cut -c1-100

nested=(--cap-add ALL --cap-drop SYS_RESOURCE --security-opt seccomp=unconfined --security-opt systempaths=unconfined
  -v /sys/fs/cgroup:/sys/fs/cgroup:rw)
wheels=${PIP_FIND_LINKS:-}
docker run -d --name "$name" --label io.vllm-matrix.bench=fresh "${nested[@]}" \
  -v "$name-engine:/var/lib/docker" -v "$scratch/repo:/src:ro" \
  ${wheels:+-v "$wheels:$wheels:ro" -e "PIP_FIND_LINKS=$wheels"} \
  -e PIP_CERT=/etc/ssl/certs/ca-certificates.crt -e SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  "$base" sleep infinity >/dev/null
# This machine's own settings for apt, pip and the proxy's CA: a fresh machine here has them.
for f in /etc/apt/apt.conf.d/99*; do [ -f "$f" ] && docker cp "$f" "$name:/etc/apt/apt.conf.d/"; done
[ -f /etc/pip.conf ] && docker cp /etc/pip.conf "$name:/etc/pip.conf"
docker exec "$name" mkdir -p /usr/local/share/ca-certificates
for f in /usr/local/share/ca-certificates/*.crt; do [ -f "$f" ] && docker cp "$f" "$name:/usr/local/share/ca-certificates/"; done
printf 'bench-fresh: the machine'"'"'s baseline (python3, make, git; not timed)\n'
baseline='apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends'
baseline+=' python3 make git ca-certificates && update-ca-certificates && git clone -q /src /repo'
if ! docker exec "$name" bash -c "$baseline" \
  >"$scratch/baseline.log" 2>&1; then
  tail -20 "$scratch/baseline.log" >&2
  printf 'bench-fresh: the baseline install failed in %s (above); nothing was timed\n' "$base" >&2
  exit 1
fi

printf 'bench-fresh: make run (log: %s)\n' "$out/fresh.log"
start=$SECONDS
set +e
docker exec "$name" bash -c 'cd /repo && make run' 2>&1 | while IFS= read -r line; do
  printf '%4d %s\n' $((SECONDS - start)) "$line"
done >"$out/fresh.log"
rc=${PIPESTATUS[0]}
set -e
wall=$((SECONDS - start))
# The steps' starts as the log shows them: setup's `+` lines, the build's and the smoke's first lines, and whether
# the profiles ran side by side (the tool's `[cpu] profiles:` line: the cores and memory it measured in there).
awk '/^ *[0-9]+ \+ |\[cpu\] #1 |\[cpu\] triton-import|\[cpu\] profiles: |profile restricted|smoke [0-9]+ s wall/ {print}' \
  "$out/fresh.log" | cut -c1-220
printf '{"make_run_exit": %d, "make_run_seconds": %d, "base": "%s", "cpus": %d}\n' "$rc" "$wall" "$base" "$(nproc)" >"$out/fresh.json"
printf 'fresh machine -> make run: exit %d in %d s (target, issue 39: at most 200 s; build/bench/fresh.json)\n' "$rc" "$wall"
exit "$rc"
