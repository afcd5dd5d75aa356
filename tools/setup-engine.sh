#!/usr/bin/env bash
# Install and start what `tools/matrix` needs on Debian 12 (bookworm) or 13 (trixie), as root:
# a Docker engine, the buildx CLI plugin (BuildKit), debootstrap (stand-in base images),
# qemu-user-static (linux/arm64 emulation) and Debian's docker-registry (tests of push/pull).
# Idempotent: installs only what is missing and starts dockerd only when no engine answers.
#
# Why trixie on bookworm: Debian 12 ships engine 20.10 without the buildx plugin; the single
# `docker-buildx` package of Debian 13 depends only on libc6, so it is taken from trixie with an
# apt pin that keeps every other package on bookworm.
set -euo pipefail

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

# Engine, base-image maker, emulation, registry server.
apt_install docker.io debootstrap qemu-user-static binfmt-support docker-registry ca-certificates
# The project's own venv (`make venv`) needs these on a bare Debian.
command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3 python3-venv python3-pip

# buildx: from the default suite on 13, from trixie (pinned low) on 12.
if ! have_pkg docker-buildx; then
  if [ "$debian_major" -eq 12 ]; then
    # The mirror bookworm already uses (deb822 `URIs:` or one-line `deb` entries), never a comment.
    mirror=$( { sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null
                sed -n 's/^deb[[:space:]]\+\([^[]\S*\)[[:space:]].*/\1/p' /etc/apt/sources.list 2>/dev/null; } \
              | tr ' ' '\n' | grep -E '/debian/?$' | head -n1 || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    cat > /etc/apt/sources.list.d/trixie-buildx.sources <<SRC
Types: deb
URIs: ${mirror%/}
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    cat > /etc/apt/preferences.d/trixie-buildx <<'PIN'
# Only docker-buildx comes from trixie; see tools/setup-engine.sh.
Package: *
Pin: release n=trixie
Pin-Priority: 100

Package: docker-buildx
Pin: release n=trixie
Pin-Priority: 990
PIN
    apt_updated=0
  fi
  apt_install docker-buildx
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

# arm64 emulation: qemu-user-static registers binfmt handlers; make sure they are loaded.
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
  update-binfmts --enable qemu-aarch64 2>/dev/null || true
fi

docker buildx version >/dev/null 2>&1 || die "docker buildx is not usable; see 'tools/matrix doctor'"
log "engine ready: $(docker version --format 'server {{.Server.Version}}, client {{.Client.Version}}'), $(docker buildx version)"
