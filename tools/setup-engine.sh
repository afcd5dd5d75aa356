#!/usr/bin/env bash
# Install and start what `tools/matrix` needs on Debian 12 (bookworm) or 13 (trixie), as root:
# a Docker engine, the buildx CLI plugin (BuildKit), debootstrap (stand-in base images),
# QEMU user mode >= 10 (linux/arm64 emulation), Debian's docker-registry (tests of push/pull) and cosign 2.x
# (signatures and attestations: push --sign-key, --verify-key).
# Idempotent: installs only what is missing and starts dockerd only when no engine answers.
#
# `--minimal` (what `make run` needs: the CPU image built and smoke-tested on this machine's own platform): the
# engine, buildx, debootstrap, the venv's python3-venv and QEMU's static user-mode emulators (qemu-user, which the
# cpu-floor check mounts to run the image on its declared CPU floor); the binfmt handler, docker-registry and
# cosign are for the tests, linux/arm64 and signing (`make setup`).
#
# Why trixie on bookworm: Debian 12 ships engine 20.10 without the buildx plugin, and QEMU 7.2, under
# which `import torch` (PyPI's aarch64 torch 2.13.0) dies with a segmentation fault while QEMU 10.0 runs
# it (both seen here, 2026-11-30). Bookworm has no cosign. Debian 13's `docker-buildx` and `cosign` (2.5, a Go
# binary) depend only on libc6, its `qemu-user` is static and depends on nothing, `qemu-user-binfmt` only on
# it: these few are taken from trixie with an apt pin that keeps every other package on bookworm.
set -euo pipefail

minimal=0
case "${1:-}" in
  --minimal) minimal=1;;
  "") ;;
  *) printf 'setup-engine: unknown argument %s (the only one: --minimal)\n' "$1" >&2; exit 2;;
esac

log() { printf '+ %s\n' "$*" >&2; }
die() { printf 'setup-engine: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (it installs Debian packages and starts dockerd); rerun with sudo"
[ -r /etc/debian_version ] || die "only Debian 12/13 are supported; install Docker + buildx by hand, then run 'tools/matrix doctor'"

debian_major=$(cut -d. -f1 /etc/debian_version)
case "$debian_major" in
  12|13) ;;
  *) die "Debian $(cat /etc/debian_version) is not supported (need 12 or 13)";;
esac

have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

apt_updated=0
apt_update() {
  if [ "$apt_updated" -eq 0 ]; then log apt-get update; apt-get update -qq; apt_updated=1; fi
}

apt_install() {
  local missing=()
  for p in "$@"; do have_pkg "$p" || missing+=("$p"); done
  [ "${#missing[@]}" -eq 0 ] && return 0
  apt_update
  log apt-get install "${missing[@]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Engine, base-image maker; for the full setup also the binfmt tools and the registry server.
if [ "$minimal" -eq 1 ]; then
  apt_install docker.io debootstrap ca-certificates
else
  apt_install docker.io debootstrap binfmt-support docker-registry ca-certificates
fi
# The project's own venv (`make venv`) needs these on a bare Debian.
command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3 python3-venv python3-pip

# On 12: the trixie suite, pinned low, with high pins for only the packages named above.
if [ "$debian_major" -eq 12 ]; then
  # The mirror bookworm already uses (deb822 `URIs:` or one-line `deb` entries), never a comment.
  mirror=$( { sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null
              sed -n 's/^deb[[:space:]]\+\([^[]\S*\)[[:space:]].*/\1/p' /etc/apt/sources.list 2>/dev/null; } \
            | tr ' ' '\n' | grep -E '/debian/?$' | head -n1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  sources=$(cat <<SRC
Types: deb
URIs: ${mirror%/}
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
)
  pins=$(cat <<'PIN'
# Only these packages come from trixie; see tools/setup-engine.sh.
Package: *
Pin: release n=trixie
Pin-Priority: 100

Package: docker-buildx qemu-user qemu-user-binfmt qemu-user-static cosign
Pin: release n=trixie
Pin-Priority: 990
PIN
)
  if [ "$(cat /etc/apt/sources.list.d/trixie-buildx.sources 2>/dev/null)" != "$sources" ] \
     || [ "$(cat /etc/apt/preferences.d/trixie-buildx 2>/dev/null)" != "$pins" ]; then
    printf '%s\n' "$sources" > /etc/apt/sources.list.d/trixie-buildx.sources
    printf '%s\n' "$pins" > /etc/apt/preferences.d/trixie-buildx
    apt_updated=0
  fi
fi

if [ "$minimal" -eq 1 ]; then apt_install docker-buildx; else apt_install docker-buildx cosign; fi

# arm64 emulation and the cpu-floor check's CPU models: QEMU >= 10 (see the top of this file); --minimal without the
# binfmt handler (the CPU image is built for this machine's platform).
qemu_packages=(qemu-user qemu-user-binfmt)
[ "$minimal" -eq 0 ] || qemu_packages=(qemu-user)
qemu_version=$(have_pkg qemu-user && dpkg-query -W -f='${Version}' qemu-user || true)
if [ -z "$qemu_version" ] || dpkg --compare-versions "$qemu_version" lt 1:10 \
   || { [ "$minimal" -eq 0 ] && ! have_pkg qemu-user-binfmt; }; then
  apt_update
  log "apt-get install ${qemu_packages[*]} (QEMU ${qemu_version:-absent} -> >= 10)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${qemu_packages[@]}" >/dev/null
  # qemu-user-static 7.2 (bookworm) would keep the old binaries: take trixie's transitional package.
  if have_pkg qemu-user-static; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user-static >/dev/null
  fi
  qemu_version=$(dpkg-query -W -f='${Version}' qemu-user)
  dpkg --compare-versions "$qemu_version" ge 1:10 || die "QEMU $qemu_version installed; linux/arm64 needs >= 10"
fi

# Start the daemon if none answers.
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: /var/log/dockerd.log)"
  if [ -d /run/systemd/system ]; then  # booted with systemd (also when it reports "degraded")
    systemctl start docker
  else
    # A dockerd killed without a clean shutdown (a session or a machine that stopped) leaves its pid file
    # behind, and a new dockerd then refuses to start: remove pid files whose process is gone.
    for pidfile in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
      if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null; then
        log "removing stale $pidfile"
        rm -f "$pidfile"
      fi
    done
    nohup dockerd >/var/log/dockerd.log 2>&1 &
  fi
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || die "dockerd did not answer within 60 s; see /var/log/dockerd.log"
fi

# arm64 emulation: the binfmt handler, from qemu-user-binfmt's /usr/lib/binfmt.d file (systemd-binfmt reads
# it at boot; without systemd nobody does, so it is written to the kernel here). Its F flag makes the kernel
# keep the interpreter it opened at registration: after a QEMU upgrade the handler is registered again, as
# the stamp file (the QEMU version registered) tells.
binfmt=/proc/sys/fs/binfmt_misc
stamp=/var/lib/vllm-matrix/binfmt-qemu-aarch64
if [ "$minimal" -eq 0 ]; then
  mountpoint -q "$binfmt" || mount -t binfmt_misc binfmt_misc "$binfmt"
  if [ ! -e "$binfmt/qemu-aarch64" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$qemu_version" ]; then
    if [ -e "$binfmt/qemu-aarch64" ]; then echo -1 > "$binfmt/qemu-aarch64"; fi
    log "registering the qemu-aarch64 binfmt handler (QEMU $qemu_version)"
    grep '^:qemu-aarch64:' /usr/lib/binfmt.d/qemu-aarch64.conf > "$binfmt/register"
    mkdir -p "$(dirname "$stamp")" && printf '%s\n' "$qemu_version" > "$stamp"
  fi
  [ -e "$binfmt/qemu-aarch64" ] || die "the qemu-aarch64 binfmt handler did not register; see $binfmt"
fi

docker buildx version >/dev/null 2>&1 || die "docker buildx is not usable; see 'tools/matrix doctor'"
log "engine ready: $(docker version --format 'server {{.Server.Version}}, client {{.Client.Version}}'), $(docker buildx version)"
