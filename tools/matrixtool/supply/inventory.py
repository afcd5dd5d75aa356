"""What is really installed in an image, read inside it: ``incontainer/sbom_inventory.py`` (standard library
only) runs in a tracked container (no network, a timeout, always removed) and prints one bounded marker line."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from matrixtool.core import jsontext, markers, untrusted
from matrixtool.core.container import OWNER_ENV_VAR, ContainerSpec, TrackedContainer
from matrixtool.core.errors import WrongPlatformError
from matrixtool.supply.sbom import SbomError

PROGRAM = Path(__file__).parent.parent / "incontainer" / "sbom_inventory.py"
MARKER = "MATRIX-SBOM "
# The label that says what the inventory container is for (``TrackedContainer`` adds session and owner).
PURPOSE_LABEL = "io.vllm-matrix.purpose"
TIMEOUT_S = 180
# The inventory of the CPU image is about 100 kB; anything past this is not the program's output.
MAX_OUTPUT = 16 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class PythonDist:
    """One installed Python distribution (a ``*.dist-info`` folder); ``size``: bytes, from RECORD's sizes."""

    name: str
    version: str
    license: str
    license_source: str
    installer: str
    record_sha256: str
    files: int
    size: int
    path: str
    summary: str = ""


@dataclass(frozen=True, kw_only=True)
class DebianPackage:
    """One installed Debian package (``/var/lib/dpkg/status``); ``installed_size_kib``: dpkg's Installed-Size."""

    name: str
    version: str
    arch: str
    source: str
    source_version: str
    licenses: tuple[str, ...]
    installed_size_kib: int


@dataclass(frozen=True, kw_only=True)
class ImageIdentity:
    """The image an SBOM describes: ``image_id`` is the engine's ID (``sha256:`` config digest), ``repo_digests``
    the ``name@sha256:…`` manifest digests the engine recorded on pull or push (empty for a local build)."""

    ref: str
    image_id: str
    repo_digests: tuple[str, ...]
    platform: str


@dataclass(frozen=True, kw_only=True)
class Inventory:
    """What ``sbom_inventory.py`` found in ``image``; ``os``: /etc/os-release's ID, VERSION_ID, VERSION_CODENAME."""

    image: ImageIdentity
    os: Mapping[str, str]
    python: tuple[PythonDist, ...]
    debian: tuple[DebianPackage, ...]


# --- reading the image ---------------------------------------------------------------------------------------
def identify(client: docker.DockerClient, ref: str) -> ImageIdentity:
    """Raises SbomError: the engine has no image ``ref`` (the message names the pull or build to run)."""
    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound as exc:
        raise SbomError(f"no image {ref!r} on this engine; build it ('tools/matrix build') or pull it first") from exc
    attrs = image.attrs
    platform = f"{attrs.get('Os', 'linux')}/{attrs.get('Architecture', '')}"
    if attrs.get("Variant"):
        platform += f"/{attrs['Variant']}"
    return ImageIdentity(
        ref=ref, image_id=str(image.id), repo_digests=tuple(sorted(attrs.get("RepoDigests") or ())), platform=platform
    )


def container_spec(ref: str) -> ContainerSpec:
    """The inventory container: the program as ``python3 -c``, no network, the image's own user, purpose
    ``sbom`` (``TrackedContainer`` adds the session and owner labels)."""
    return ContainerSpec(
        image=ref,
        entrypoint=["python3", "-c", PROGRAM.read_text(encoding="utf-8")],
        command=[],
        network_mode="none",
        labels={PURPOSE_LABEL: "sbom"},
    )


def _bounded(chunks: Iterable[bytes], limit: int = MAX_OUTPUT) -> bytes:
    """The first ``limit`` bytes of a stream of chunks (the rest is not read)."""
    data = bytearray()
    for chunk in chunks:
        data += chunk[: limit - len(data)]
        if len(data) >= limit:
            break
    return bytes(data)


_COUNT = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
_TEXT = {"type": ["string", "null"]}
# The inventory of ``incontainer/sbom_inventory.py`` as ``inventory_of`` reads it: the image's own python3 prints
# it, so an image can print anything there.
INVENTORY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["python", "debian"],
    "properties": {
        "os": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
        "python": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    **{
                        k: _TEXT
                        for k in ("name", "version", "license", "license_source", "installer", "record_sha256", "path")
                    },
                    "summary": _TEXT,
                    "files": _COUNT,
                    "size": _COUNT,
                },
            },
        },
        "debian": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    **{k: _TEXT for k in ("name", "version", "arch", "source", "source_version")},
                    "licenses": {"type": "array", "items": {"type": "string"}},
                    "installed_size_kib": _COUNT,
                },
            },
        },
    },
}


def parse_output(output: str) -> dict[str, Any]:
    """The inventory document of the program's output (its last ``MATRIX-SBOM`` line). Raises SbomError: no such line,
    or it is not a JSON object with ``python`` and ``debian`` lists of the shape ``INVENTORY_SCHEMA`` declares (the key
    path named)."""
    line = markers.last(output, MARKER)
    if line is None:
        tail = output.strip()[-500:]
        raise SbomError(f"the inventory program printed no {MARKER.strip()} line; its output ends: {tail!r}")
    try:
        doc = jsontext.loads(line.payload)
    except ValueError as exc:
        raise SbomError(f"the inventory line is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("python"), list) or not isinstance(doc.get("debian"), list):
        raise SbomError("the inventory line is not an object with 'python' and 'debian' lists")
    problems = untrusted.shape_problems(doc, INVENTORY_SCHEMA, limit=3)
    if problems:
        raise SbomError(f"the inventory line is of another shape: {'; '.join(problems)}")
    return doc


def inventory_of(identity: ImageIdentity, doc: Mapping[str, Any]) -> Inventory:
    """The ``Inventory`` of a parsed program document (``parse_output``) for ``identity``."""
    python = tuple(
        PythonDist(
            name=str(d.get("name", "")),
            version=str(d.get("version", "")),
            license=str(d.get("license", "")),
            license_source=str(d.get("license_source", "")),
            installer=str(d.get("installer", "")),
            record_sha256=str(d.get("record_sha256", "")),
            files=int(d.get("files", 0)),
            size=int(d.get("size", 0)),
            path=str(d.get("path", "")),
            summary=str(d.get("summary", "")),
        )
        for d in doc["python"]
        if d.get("name")
    )
    debian = tuple(
        DebianPackage(
            name=str(p.get("name", "")),
            version=str(p.get("version", "")),
            arch=str(p.get("arch", "")),
            source=str(p.get("source", "")),
            source_version=str(p.get("source_version", "")),
            licenses=tuple(str(x) for x in p.get("licenses", ())),
            installed_size_kib=int(p.get("installed_size_kib", 0)),
        )
        for p in doc["debian"]
        if p.get("name")
    )
    return Inventory(
        image=identity, os={str(k): str(v) for k, v in (doc.get("os") or {}).items()}, python=python, debian=debian
    )


def read_inventory(
    client: docker.DockerClient, ref: str, *, env: Mapping[str, str] | None = None, timeout: float = TIMEOUT_S
) -> Inventory:
    """Run the inventory program in ``ref`` (the container is removed whatever happens); ``timeout`` in seconds.

    Raises SbomError: no such image, the image has no ``python3``, the program failed or timed out.
    """
    identity = identify(client, ref)
    owner = (env if env is not None else os.environ).get(OWNER_ENV_VAR, "")
    tracked = TrackedContainer(client, container_spec(ref), owner=owner)
    try:
        try:
            container = tracked.start()
        except (
            docker.errors.APIError,
            WrongPlatformError,
        ) as exc:  # no python3 in the image: the engine cannot start it
            cause = exc.__cause__ if isinstance(exc, WrongPlatformError) else exc
            explained = cause.explanation if isinstance(cause, docker.errors.APIError) else None
            raise SbomError(f"cannot run python3 in {ref}: {explained or cause}") from exc
        output = _stdout(container, ref, timeout)
    except BaseException:
        tracked.sweep()  # a container the engine created but could not start is held by no one
        raise
    finally:
        tracked.remove()
    return inventory_of(identity, parse_output(output))


def _stdout(container: Container, ref: str, timeout: float) -> str:
    """The program's stdout (bounded) once it exits 0 within ``timeout`` seconds. Raises SbomError: it did not exit in
    time, or exited non-zero (its stderr's end quoted)."""
    try:
        status = container.wait(timeout=timeout)
    except Exception as exc:  # requests' ReadTimeout, or the engine went away
        raise SbomError(f"the inventory of {ref} did not finish within {timeout:.0f} s ({exc})") from exc
    output = _bounded(container.logs(stdout=True, stderr=False, stream=True, follow=False)).decode("utf-8", "replace")
    if status.get("StatusCode") != 0:
        errors = _bounded(container.logs(stdout=False, stderr=True, stream=True, follow=False)).decode(
            "utf-8", "replace"
        )
        raise SbomError(
            f"the inventory program failed in {ref} (exit {status.get('StatusCode')}): {errors.strip()[-2000:]}; "
            "the image needs a python3 on its PATH"
        )
    return output
