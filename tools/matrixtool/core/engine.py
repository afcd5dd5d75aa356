"""The Docker engine: one client per command, reachability, and ``doctor``'s findings."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import docker
import docker.errors
import requests.exceptions

from matrixtool.core import http, process
from matrixtool.core.errors import EngineUnreachableError
from matrixtool.core.process import echo as echo  # imported from here by supply/imagediff

SETUP_HINT = "run 'make engine' (as root on Debian 12/13) or start your Docker engine"
DEFAULT_HOST = "unix:///var/run/docker.sock"
# What `docker buildx build` prints when the engine (and its BuildKit) went away under it: the gRPC stream to
# BuildKit broke (dockerd stopped or restarted: "failed to receive status: rpc error: code = Unavailable desc =
# error reading from server: EOF", seen with dockerd 20.10 and buildx 0.20), or the socket is gone.
ENGINE_LOST_MARKERS = (
    "code = Unavailable",
    "error reading from server: EOF",
    "transport is closing",
    "Cannot connect to the Docker daemon",
)
# What the engine says when its data root is full (a build's snapshot, the context it receives, an export).
NO_SPACE_MARKER = "no space left on device"


def host(env: Mapping[str, str]) -> str:
    """The engine the Docker SDK and CLI talk to: ``DOCKER_HOST``, else the default socket."""
    return env.get("DOCKER_HOST") or DEFAULT_HOST


# How the Docker SDK raises an engine that stopped or restarted during a request: requests' ConnectionError
# (``Connection aborted``, refused, no such socket file) or a response cut short (ChunkedEncodingError).
GONE: tuple[type[Exception], ...] = (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError)


def gone_message(env: Mapping[str, str], during: str, detail: str, *, tagged: str = "") -> str:
    """The message of an engine (``host(env)``) that went away ``during`` something ("the run", "the build of
    cpu (linux/amd64) after 8 s"); ``tagged``: what the caller knows of tags (a build that broke off tagged
    nothing; earlier builds of the same run keep theirs, so "the run" claims nothing). The tool's containers are
    AutoRemove'd by the engine or removed by the tool once it is back (``container.TrackedContainer.remove``)."""
    return (
        f"the Docker engine at {host(env)} went away during {during}: {detail}; {tagged + '; ' if tagged else ''}"
        "check that it runs ('tools/matrix doctor'), then rerun"
    )


def lost_line(lines: Sequence[str]) -> str | None:
    """The last error line of ``docker buildx build`` itself (``ERROR: ...``; not a build step's output, which
    may print anything) that says the engine went away (``ENGINE_LOST_MARKERS``), else None."""
    errors = (x for x in reversed(lines) if x.lstrip().startswith("ERROR:"))
    return next((x for x in errors if any(m in x for m in ENGINE_LOST_MARKERS)), None)


def no_space_line(lines: Sequence[str]) -> str | None:
    """The last line of build output that says the disk is full (``NO_SPACE_MARKER``), else None: buildx's own
    error (BuildKit could not write a snapshot, the context, an export) or a build step's (pip's ``[Errno 28]``);
    either way the engine's data root, where the steps' files live."""
    return next((x for x in reversed(lines) if NO_SPACE_MARKER in x.lower()), None)


def connect() -> docker.DockerClient:
    """Raises EngineUnreachableError: no engine answers a ping."""
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as exc:
        raise EngineUnreachableError(f"no Docker engine answers ({exc}); {SETUP_HINT}") from exc
    return client


def note(message: str) -> None:
    """A progress line on stderr (what a command is doing, as it happens; the result goes to stdout)."""
    print(message, file=sys.stderr, flush=True)


class FindingStatus(str, Enum):
    """Outcome of one doctor probe."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One line of ``tools/matrix doctor``: what was probed, what was seen, and the fix when not ok."""

    name: str
    status: FindingStatus
    detail: str
    fix: str = ""


def _run(argv: list[str], timeout: float = 30) -> process.Completed:
    return process.run(argv, timeout=timeout, quiet=True)


# QEMU 7.2 (Debian 12) dies with SIGSEGV in `import torch` of PyPI's aarch64 torch 2.13.0; 10.0 runs it
# (both seen here on 2026-11-30; tools/setup-engine.sh installs 10 from trixie).
QEMU_MIN_MAJOR = 10


def qemu_major(version_text: str) -> int | None:
    """The major version in ``qemu-aarch64 --version`` output ("qemu-aarch64 version 10.0.13 (Debian …)")."""
    m = re.search(r"version (\d+)\.", version_text)
    return int(m.group(1)) if m else None


BINFMT_AARCH64 = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")


def qemu_finding(platforms: str) -> Finding:
    """The arm64-emulation finding once the builder lists linux/arm64: OK with QEMU >= ``QEMU_MIN_MAJOR``,
    WARN when older or unknown. Reads the interpreter of the kernel's binfmt handler (``BINFMT_AARCH64``)
    and runs it with ``--version`` (a subprocess, at most 30 s); never raises."""
    try:
        line = next(x for x in BINFMT_AARCH64.read_text().splitlines() if x.startswith("interpreter "))
        # Resolved: Debian's .../aarch64-binfmt-P wrapper name makes QEMU take `--version` for a program.
        interpreter = os.path.realpath(line.split(" ", 1)[1])
        text = (_run([interpreter, "--version"]).stdout.splitlines() or [""])[0]
    except (OSError, StopIteration):
        interpreter, text = "", ""
    major = qemu_major(text)
    if major is None or major < QEMU_MIN_MAJOR:
        return Finding(
            name="arm64-emulation",
            status=FindingStatus.WARN,
            detail=f"{text or 'QEMU version unknown'} ({interpreter or BINFMT_AARCH64}); `import torch` of aarch64 "
            f"torch 2.13 segfaults under QEMU < {QEMU_MIN_MAJOR}",
            fix="run 'make engine' (it installs QEMU 10 from Debian trixie and registers it again)",
        )
    return Finding(name="arm64-emulation", status=FindingStatus.OK, detail=f"{text}; builder platforms: {platforms}")


def builder_platforms() -> set[str]:
    """The platforms the default BuildKit builder can build (``docker buildx inspect``), e.g.
    {"linux/amd64", "linux/arm64"} once qemu-user-static registered its binfmt handlers."""
    proc = _run(["docker", "buildx", "inspect", "--bootstrap"])
    line = next((x for x in proc.stdout.splitlines() if x.strip().startswith("Platforms:")), "")
    return {p.strip().rstrip("*") for p in line.split(":", 1)[-1].split(",") if p.strip()}


def doctor(registry: str = "registry-1.docker.io", *, env: Mapping[str, str]) -> list[Finding]:
    """Probe engine, buildx, arm64 emulation and registry reachability (each probe ≤ 30 s); the registry through
    the CA bundle and proxies of ``env`` (``core.http``)."""
    findings: list[Finding] = []
    try:
        client = docker.from_env(timeout=30)
        version = client.version()
        findings.append(
            Finding(
                name="engine",
                status=FindingStatus.OK,
                detail=f"server {version.get('Version')} "
                f"(API {version.get('ApiVersion')}, {version.get('Os')}/{version.get('Arch')})",
            )
        )
    except docker.errors.DockerException as exc:
        findings.append(Finding(name="engine", status=FindingStatus.FAIL, detail=str(exc), fix=SETUP_HINT))
        client = None
    if shutil.which("docker") is None:
        findings.append(
            Finding(
                name="buildx",
                status=FindingStatus.FAIL,
                detail="no docker CLI on PATH",
                fix="install the docker CLI and the buildx plugin ('make engine')",
            )
        )
    else:
        proc = _run(["docker", "buildx", "version"])
        if proc.returncode == 0:
            findings.append(Finding(name="buildx", status=FindingStatus.OK, detail=proc.stdout.strip()))
        else:
            findings.append(
                Finding(
                    name="buildx",
                    status=FindingStatus.FAIL,
                    detail=proc.stderr.strip()[:200],
                    fix="install the buildx CLI plugin (Debian: docker-buildx; 'make engine')",
                )
            )
    if client is not None:
        platforms = ", ".join(sorted(builder_platforms()))
        if "linux/arm64" in platforms:
            findings.append(qemu_finding(platforms))
        else:
            findings.append(
                Finding(
                    name="arm64-emulation",
                    status=FindingStatus.WARN,
                    detail=f"builder platforms: {platforms or 'unknown'}",
                    fix="install qemu-user-static and binfmt-support ('make engine') to build linux/arm64 variants",
                )
            )
    findings.append(_registry_finding(registry, env))
    return findings


def _registry_finding(registry: str, env: Mapping[str, str]) -> Finding:
    url = f"https://{registry}/v2/"
    answer = http.answer(http.session(ca_cert=http.ca_bundle(None, env), env=env), url, timeout=10)
    if isinstance(answer, str):
        return Finding(
            name="registry",
            status=FindingStatus.WARN,
            detail=f"{url} unreachable ({answer})",
            fix="air-gapped: 'tools/matrix base <variant>' makes stand-in base images with debootstrap",
        )
    # 401 is the normal answer of a registry to an anonymous /v2/ probe.
    ok = answer in (200, 401)
    return Finding(
        name="registry",
        status=FindingStatus.OK if ok else FindingStatus.WARN,
        detail=f"{url} answered {answer}",
        fix="" if ok else "check the registry address or your proxy",
    )
