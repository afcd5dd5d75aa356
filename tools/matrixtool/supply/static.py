"""OpenShift's static checks of an image (Red Hat's container certification, "preflight"), without running it.

``user``: a numeric UID other than 0 (OpenShift runs images as an arbitrary UID; a name cannot be resolved by
the platform).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import docker
from docker_image import reference as oci

from matrixtool.core.container import ContainerSpec, TrackedContainer
from matrixtool.core.errors import ExitCode, MatrixError

MAX_LAYERS = 40
REQUIRED_LABELS = ("name", "vendor", "version", "release", "summary", "description")
RECOMMENDED_LABELS = ("maintainer",)
LICENSES_DIR = "/licenses"
# /licenses is a few MB of text; the tar stream is read no further than this.
MAX_LICENSES_BYTES = 256 * 1024 * 1024
PURPOSE_LABEL = "io.vllm-matrix.purpose"


class StaticCheckFailure(MatrixError):
    """At least one OpenShift static check failed."""

    exit_code = ExitCode.STATIC


@dataclass(frozen=True, kw_only=True)
class StaticResult:
    """One static check's result; ``detail``: what was found, and the fix when it failed."""

    name: str
    passed: bool
    detail: str


def judge(ref: str, attrs: Mapping[str, Any], license_files: Sequence[str]) -> list[StaticResult]:
    """The static checks of the image ``ref`` with the engine record ``attrs`` and ``license_files`` (paths of
    the regular files under /licenses)."""
    config = attrs.get("Config") or {}
    labels = config.get("Labels") or {}
    layers = len((attrs.get("RootFS") or {}).get("Layers") or ())
    results = [
        StaticResult(
            name="licenses",
            passed=bool(license_files),
            detail=f"{len(license_files)} file(s) in {LICENSES_DIR}"
            if license_files
            else f"{LICENSES_DIR} is missing or empty; copy the distributions' and packages' license files there",
        ),
        StaticResult(
            name="layers",
            passed=layers <= MAX_LAYERS,
            detail=f"{layers} layers (at most {MAX_LAYERS})"
            + ("" if layers <= MAX_LAYERS else "; merge RUN steps of the template"),
        ),
    ]
    missing = [k for k in REQUIRED_LABELS if not str(labels.get(k, "")).strip()]
    unset = [k for k in RECOMMENDED_LABELS if not str(labels.get(k, "")).strip()]
    detail = (
        f"missing: {', '.join(missing)}; set them in the template's LABEL" if missing else "all required labels set"
    )
    if unset:
        detail += f" (recommended, not set: {', '.join(unset)})"
    results.append(StaticResult(name="labels", passed=not missing, detail=detail))
    user = str(config.get("User") or "")
    uid = user.split(":", 1)[0]
    if not uid:
        results.append(
            StaticResult(name="user", passed=False, detail="no USER: the image runs as root; set USER <uid>")
        )
    elif not uid.isdigit():
        results.append(StaticResult(name="user", passed=False, detail=f"USER {user!r} is a name; give a numeric UID"))
    elif int(uid) == 0:
        results.append(
            StaticResult(name="user", passed=False, detail=f"USER {user!r} is root; give a UID other than 0")
        )
    else:
        results.append(StaticResult(name="user", passed=True, detail=f"USER {user}"))
    tag = _tag_of(ref)
    results.append(
        StaticResult(
            name="tag",
            passed=bool(tag) and tag != "latest",
            detail=f"tag {tag!r}"
            if tag and tag != "latest"
            else f"tag {tag or 'none'!r}: give a unique tag, not latest",
        )
    )
    return results


def _tag_of(ref: str) -> str | None:
    try:
        parsed = oci.Reference.parse_normalized_named(ref)
    except oci.InvalidReference:
        return None
    tag = parsed["tag"]
    return str(tag) if tag else None


def license_listing(stream: Any, *, limit: int = MAX_LICENSES_BYTES) -> list[str]:
    """The regular files of a ``get_archive`` tar stream (chunks of bytes), reading at most ``limit`` bytes."""
    data = io.BytesIO()
    for chunk in stream:
        data.write(chunk)
        if data.tell() > limit:
            break
    data.seek(0)
    names = []
    try:
        with tarfile.open(fileobj=data, mode="r|") as archive:
            for member in archive:
                if member.isfile():
                    names.append(member.name)
    except (tarfile.TarError, EOFError):
        pass  # a stream cut at the limit: the files read so far
    return names


def inspect(client: docker.DockerClient, ref: str, *, owner: str = "") -> list[StaticResult]:
    """Read ``ref``'s record and /licenses (a created container, never started, always removed) and judge them.

    Raises docker.errors.ImageNotFound: no such image on the engine.
    """
    image = client.images.get(ref)
    spec = ContainerSpec(image=ref, entrypoint=["true"], command=[], labels={PURPOSE_LABEL: "static"})
    with TrackedContainer(client, spec, owner=owner, create_only=True) as tracked:
        try:
            stream, _ = tracked.held().get_archive(LICENSES_DIR)
            files = license_listing(stream)
        except docker.errors.NotFound:
            files = []
    return judge(ref, image.attrs, files)


def raise_for(ref: str, results: Sequence[StaticResult]) -> None:
    """Raise ``StaticCheckFailure`` naming the failed checks, if any."""
    failed = [r.name for r in results if not r.passed]
    if failed:
        raise StaticCheckFailure(f"{ref}: OpenShift static check(s) failed: {', '.join(failed)}; see the lines above")
