"""What differs between two images: Python distributions, Debian packages, the shared libraries the extensions
of vLLM, torch and Triton need, env, entrypoint, user, labels and layers; ranked for a failing check.

Engine facts come from ``docker inspect``/``history`` (Docker SDK); in-image facts from one short program
(``incontainer/imagefacts.py``) run once per image in a ``TrackedContainer`` (labelled, always removed).
"""

from __future__ import annotations

import importlib.resources
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import docker
import docker.errors

from matrixtool.core import jsontext, markers, process
from matrixtool.core.container import OWNER_ENV_VAR, ContainerSpec, TrackedContainer
from matrixtool.core.errors import ConfigError, NotBuiltError, SmokeFailure, WrongPlatformError
from matrixtool.core.untrusted import shape_problems
from matrixtool.incontainer.vllm_smoke.bounded import OutputLimit
from matrixtool.model.checks import CHECKS
from matrixtool.model.yamlfile import read_config_text
from matrixtool.report import READ_BACK_SCHEMA, human_size

MARK = "@@image-facts@@"
# Seconds the facts program may take (ldd over a few hundred .so files).
FACTS_TIMEOUT = 300
# The most bytes of program output read back.
MAX_OUTPUT_BYTES = 16 * 1024 * 1024
MAX_REPORT_BYTES = 64 * 1024 * 1024


class Section(str, Enum):
    """Where a difference is."""

    PYTHON = "python"
    DEBIAN = "debian"
    LIBS = "libs"
    ENV = "env"
    ENTRYPOINT = "entrypoint"
    CMD = "cmd"
    USER = "user"
    LABELS = "labels"
    LAYERS = "layers"
    IMAGE = "image"


@dataclass(frozen=True, kw_only=True)
class ImageFacts:
    """One image as ``diff`` compares it; ``inside`` is the facts program's JSON document."""

    ref: str
    image_id: str
    size: int
    env: Mapping[str, str]
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    user: str
    labels: Mapping[str, str]
    layers: tuple[tuple[str, int], ...]
    inside: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class Difference:
    """One key of one section: its value in A and in B (None: absent there)."""

    section: Section
    key: str
    a: str | None
    b: str | None

    def __str__(self) -> str:
        return f"{self.section.value:10} {self.key}: {self.a if self.a is not None else '(absent)'} -> " + (
            self.b if self.b is not None else "(absent)"
        )


# What each check is about: (section, key pattern) pairs ranked first by ``rank``.
_TRITON = ("triton", "pytorch-triton*", "torch")
RELEVANT: dict[str, tuple[tuple[Section, tuple[str, ...]], ...]] = {
    "triton-import": ((Section.PYTHON, _TRITON),),
    "no-fake-triton": ((Section.PYTHON, (*_TRITON, "vllm*")),),
    "triton-drivers": ((Section.PYTHON, _TRITON), (Section.LIBS, ("libcuda*", "libamdhip*", "libdrm*"))),
    "triton-kernel": ((Section.PYTHON, _TRITON), (Section.LIBS, ("*",))),
    "torch-import": ((Section.PYTHON, ("torch", "nvidia-*", "numpy")), (Section.LIBS, ("*",))),
    "torch-family": ((Section.PYTHON, ("torch", "torchvision", "torchaudio", "torchcodec")),),
    "vllm-import": ((Section.PYTHON, ("vllm*", "torch", "transformers")), (Section.LIBS, ("*",))),
    "native-libs": ((Section.LIBS, ("*",)), (Section.DEBIAN, ("*",))),
    "inductor-compile": (
        (Section.PYTHON, ("torch", *_TRITON)),
        (Section.DEBIAN, ("gcc*", "g++*", "libc6-dev", "libstdc++*", "cpp*")),
    ),
    "model-runner": ((Section.ENV, ("VLLM_*",)), (Section.PYTHON, ("vllm*", *_TRITON))),
    "offline-generate": ((Section.PYTHON, ("vllm*", "torch", "transformers")), (Section.ENV, ("VLLM_*",))),
    "tiny-model": ((Section.PYTHON, ("vllm*", "transformers", "tokenizers")),),
    "pip-check": ((Section.PYTHON, ("*",)),),
    "vllm-cli": ((Section.PYTHON, ("vllm*",)), (Section.ENTRYPOINT, ("*",)), (Section.CMD, ("*",))),
    "run-conditions": ((Section.USER, ("*",)), (Section.ENV, ("*",)), (Section.ENTRYPOINT, ("*",))),
    "cpu-engine-settings": ((Section.ENV, ("VLLM_CPU_*", "OMP_*", "LD_PRELOAD")),),
    "cuda-weight": ((Section.PYTHON, ("nvidia-*", "cuda-*")), (Section.LAYERS, ("*",)), (Section.IMAGE, ("*",))),
}


def facts_program() -> str:
    """The source of the in-image facts program (run as ``python3 -c``)."""
    return importlib.resources.files("matrixtool.incontainer").joinpath("imagefacts.py").read_text(encoding="utf-8")


def container_spec(image: str) -> ContainerSpec:
    """The facts program's container: the image's entrypoint replaced by it, no network (``TrackedContainer``
    adds the session and owner labels)."""
    return ContainerSpec(
        image=image, entrypoint=["python3", "-c", facts_program()], command=[], extra={"network_disabled": True}
    )


_NULLABLE_STRING = {"type": ["string", "null"]}
# The facts document of ``incontainer/imagefacts.py`` as ``compare`` reads it. The image's own python3 prints
# it, so an image can print anything there.
FACTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "python": {"type": "string"},
        "distributions": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    **{k: _NULLABLE_STRING for k in ("version", "installer", "origin", "location")},
                    "bytes": {"type": ["integer", "null"]},
                },
            },
        },
        "debian": {"type": "object", "additionalProperties": {"type": "string"}},
        "shared_libraries": {
            "type": "object",
            "properties": {
                "libraries": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string"},
                            "needed_by": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                }
            },
        },
    },
}


def parse_output(text: str, ref: str) -> dict[str, Any]:
    """The facts document after ``MARK`` in the program's output, of the shape ``FACTS_SCHEMA`` declares. Raises
    SmokeFailure: no marker line (no python3 in the image, or it crashed), or one that is not a JSON object of that
    shape: the message holds the output tail or the key path."""
    line = markers.last(text, MARK)
    if line is None:
        raise SmokeFailure(f"{ref}: the facts program printed no result (needs python3 in the image): {text[-800:]}")
    try:
        data = jsontext.loads(line.payload)
    except ValueError as exc:
        raise SmokeFailure(f"{ref}: the facts program printed a malformed result ({exc}): {line.line[:200]}") from exc
    problems = shape_problems(data, FACTS_SCHEMA, limit=3)
    if problems:
        raise SmokeFailure(f"{ref}: the facts program printed a result of another shape: {'; '.join(problems)}")
    return dict(data)


def get_image(client: docker.DockerClient, ref: str) -> Any:
    """Raises NotBuiltError: the engine has no image ``ref``."""
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound as exc:
        raise NotBuiltError(f"no image {ref!r} on this engine; build or pull it first") from exc


def read_facts(client: docker.DockerClient, ref: str, *, env: Mapping[str, str] | None = None) -> ImageFacts:
    """Inspect ``ref`` and run the facts program in it once (container removed in every case).

    Raises NotBuiltError: the engine has no image ``ref``; SmokeFailure: the program could not start (no python3 in the
    image), failed or timed out."""
    image = get_image(client, ref)
    config = image.attrs.get("Config") or {}
    history = image.history()
    owner = (env or {}).get(OWNER_ENV_VAR, "")
    tracked = TrackedContainer(client, container_spec(ref), session=f"diff-{uuid.uuid4().hex[:12]}", owner=owner)
    process.echo(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", ref, "-c", "<imagefacts.py>"],
        via="Docker SDK",
    )
    try:
        output = _run_facts(tracked, ref)
    except BaseException:
        tracked.sweep()  # a container the engine created but could not start is held by no one
        raise
    finally:
        tracked.remove()
    env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
    return ImageFacts(
        ref=ref,
        image_id=str(image.id),
        size=int(image.attrs.get("Size") or 0),
        env=env,
        entrypoint=tuple(config.get("Entrypoint") or ()),
        cmd=tuple(config.get("Cmd") or ()),
        user=str(config.get("User") or ""),
        labels=dict(config.get("Labels") or {}),
        layers=tuple((str(h.get("CreatedBy", ""))[:120], int(h.get("Size") or 0)) for h in reversed(history)),
        inside=parse_output(output, ref),
    )


def _run_facts(tracked: TrackedContainer, ref: str) -> str:
    """Start the facts program and wait for it: its output (stdout and stderr, the last ``MAX_OUTPUT_BYTES``). Raises
    SmokeFailure: it could not start (no python3 in the image), ran past ``FACTS_TIMEOUT`` or exited non-zero."""
    try:
        container = tracked.start()
    except (docker.errors.APIError, WrongPlatformError) as exc:
        cause = exc.__cause__ if isinstance(exc, WrongPlatformError) else exc
        explained = cause.explanation if isinstance(cause, docker.errors.APIError) else None
        raise SmokeFailure(
            f"{ref}: the facts program did not start (it needs python3 in the image): {explained or cause}"
        ) from exc
    try:
        status = container.wait(timeout=FACTS_TIMEOUT)
    except Exception as exc:  # requests' ReadTimeout through the SDK
        raise SmokeFailure(f"{ref}: the facts program ran past {FACTS_TIMEOUT} s ({exc})") from exc
    output = tracked.logs(limit=OutputLimit(head_bytes=0, tail_bytes=MAX_OUTPUT_BYTES))
    if status.get("StatusCode") != 0:
        raise SmokeFailure(f"{ref}: the facts program exited {status.get('StatusCode')}: {output[-800:]}")
    return output


def _dist_text(d: Mapping[str, Any]) -> str:
    return f"{d.get('version')} ({d.get('installer') or 'no INSTALLER'}, {d.get('origin')})"


def _mapping_diff(section: Section, a: Mapping[str, str], b: Mapping[str, str]) -> list[Difference]:
    return [
        Difference(section=section, key=k, a=a.get(k), b=b.get(k))
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


def compare(a: ImageFacts, b: ImageFacts) -> list[Difference]:
    """Every difference between ``a`` and ``b``, section by section (the order of ``Section``)."""
    out: list[Difference] = []
    dists_a = {k: _dist_text(v) for k, v in (a.inside.get("distributions") or {}).items()}
    dists_b = {k: _dist_text(v) for k, v in (b.inside.get("distributions") or {}).items()}
    out += _mapping_diff(Section.PYTHON, dists_a, dists_b)
    if a.inside.get("python") != b.inside.get("python"):
        out.append(
            Difference(section=Section.PYTHON, key="(interpreter)", a=a.inside.get("python"), b=b.inside.get("python"))
        )
    out += _mapping_diff(Section.DEBIAN, a.inside.get("debian") or {}, b.inside.get("debian") or {})

    def libs(f: ImageFacts) -> dict[str, str]:
        found = (f.inside.get("shared_libraries") or {}).get("libraries") or {}
        return {k: f"{v.get('path')} (needed by {', '.join(v.get('needed_by') or [])})" for k, v in found.items()}

    la, lb = libs(a), libs(b)
    out += [
        d
        for d in _mapping_diff(Section.LIBS, la, lb)
        # A library at the same path needed by other files is no difference worth a line.
        if d.a is None or d.b is None or d.a.split(" (")[0] != d.b.split(" (")[0]
    ]
    out += _mapping_diff(Section.ENV, a.env, b.env)
    for section, va, vb in (
        (Section.ENTRYPOINT, a.entrypoint, b.entrypoint),
        (Section.CMD, a.cmd, b.cmd),
        (Section.USER, (a.user,), (b.user,)),
    ):
        if va != vb:
            out.append(Difference(section=section, key="", a=json.dumps(list(va)), b=json.dumps(list(vb))))
    out += _mapping_diff(Section.LABELS, a.labels, b.labels)
    layers_a = {f"{i:02} {cmd}": human_size(size) for i, (cmd, size) in enumerate(a.layers)}
    layers_b = {f"{i:02} {cmd}": human_size(size) for i, (cmd, size) in enumerate(b.layers)}
    out += _mapping_diff(Section.LAYERS, layers_a, layers_b)
    if a.size != b.size:
        same = human_size(a.size) == human_size(b.size)
        show = (lambda n: f"{n} bytes") if same else human_size
        out.append(Difference(section=Section.IMAGE, key="size", a=show(a.size), b=show(b.size)))
    return out


def check_problem(check: str) -> str | None:
    """Why ``check`` is not a ``--for`` value (None: it is): names every check that is."""
    if check in CHECKS:
        return None
    return f"--for {check!r} is not a check; checks: {', '.join(sorted(CHECKS))}"


def relevance(check: str, d: Difference) -> int:
    """0 for the differences ``check`` is most about, growing down ``RELEVANT[check]``; large for the rest."""
    for i, (section, patterns) in enumerate(RELEVANT.get(check, ())):
        if d.section is section and any(fnmatch(d.key, p) for p in patterns):
            return i
    return 1000


def rank(diffs: Sequence[Difference], check: str | None) -> list[Difference]:
    """``diffs`` with those relevant to ``check`` first (stable: the section order within a rank)."""
    if check is None:
        return list(diffs)
    return sorted(diffs, key=lambda d: relevance(check, d))


# ---- the last green image of a variant, for a failing run -------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class GreenImage:
    """An image every check of ``variant`` passed on, as a JSON report (``--json-file``) recorded it."""

    variant: str
    image: str
    report: Path


def green_report(reports: Path, variant: str) -> Path:
    """``<variant>.green.json``: the variant's latest all-green report on its own image (``commands._green`` writes
    it); ``<variant>.json`` is the latest report of whatever image was tested as the variant."""
    return reports / f"{variant}.green.json"


def last_green(
    reports: Path,
    variant: str,
    *,
    exclude_image: str | None = None,
    own: Callable[[str], bool] = lambda image: True,
) -> GreenImage | None:
    """The image every check of ``variant`` last passed on (or was skipped), as ``<variant>.green.json`` under
    ``reports`` records it (``green_report``), and only where ``own(image)`` says it is one of the variant's own
    images (``commands._green.own_image_problem``: its label and its ref): another variant's report, or one of an
    image merely tested as the variant (``test --image ANY --as VARIANT``), is never its last green.
    ``exclude_image``: not this one (the failing image itself). A file that is no regular file or no such report
    (``report.READ_BACK_SCHEMA``) is none. The registry is not asked."""
    path = green_report(reports, variant)
    if not path.is_file():
        return None
    try:  # a FIFO or a device is refused unread, never waited on
        doc = jsontext.loads(read_config_text(path, limit=MAX_REPORT_BYTES, what="a JSON report"))
    except (ConfigError, ValueError):
        return None
    if not isinstance(doc, dict) or shape_problems(doc, READ_BACK_SCHEMA, limit=1):
        return None
    by_image: dict[str, list[str]] = {}
    for c in doc.get("checks") or []:
        if isinstance(c, dict) and isinstance(c.get("image"), str):
            by_image.setdefault(c["image"], []).append(f"{c.get('variant')}:{c.get('status')}")
    for image, statuses in by_image.items():
        green = all(s in (f"{variant}:passed", f"{variant}:skipped") for s in statuses)
        if green and image != exclude_image and own(image):
            return GreenImage(variant=variant, image=image, report=path)
    return None


def failure_context(
    client: docker.DockerClient,
    reports: Path,
    variant: str,
    image: str,
    check: str,
    *,
    lines: int = 15,
    env: Mapping[str, str] | None = None,
    own: Callable[[str], bool] = lambda image: True,
) -> str:
    """For a failed ``check`` of ``variant`` on ``image``: a line naming the last green image and the head of
    the ``--for check`` diff against it, or one line saying why there is none (for ``run``/``test`` reports);
    ``env`` as for ``read_facts``, ``own`` as for ``last_green``."""
    green = last_green(reports, variant, exclude_image=image, own=own)
    if green is None:
        return f"no earlier green image of {variant} in {reports}"
    try:
        get_image(client, green.image)
        diffs = rank(compare(read_facts(client, green.image, env=env), read_facts(client, image, env=env)), check)
    except (NotBuiltError, SmokeFailure) as exc:
        return f"last green image of {variant}: {green.image} ({green.report.name}); no diff: {exc}"
    head = "\n".join(f"  {d}" for d in diffs[:lines])
    more = f"\n  ... {len(diffs) - lines} more: tools/matrix diff {green.image} {image}" if len(diffs) > lines else ""
    return f"last green image of {variant}: {green.image} ({green.report.name}); differences for {check}:\n{head}{more}"
