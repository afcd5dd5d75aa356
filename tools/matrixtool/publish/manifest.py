"""One tag, several architectures: publish variants that are the same stack on different platforms
(matrix.yaml ``publish_as``: ``arm64`` is published as ``cpu``) under one name, as a multi-arch manifest list.

The inputs are the records ``tools/matrix push --json`` wrote after each per-platform image passed its checks
(the image's content-hash ref and the digest the registry stored), as CI's per-runner jobs hand them to one
merge job; the list is made from those digests with ``docker buildx imagetools create``, which copies across
repositories of one registry and speaks to it with the docker CLI's credentials
(https://docs.docker.com/build/ci/github-actions/multi-platform/, "Distribute build across multiple runners").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matrixtool.build.plan import remote_ref
from matrixtool.build.registry import registry_host
from matrixtool.core import jsontext, process
from matrixtool.core.errors import ConfigError, RegistryError
from matrixtool.core.untrusted import check_shape
from matrixtool.model import reference
from matrixtool.model.model import Platform, Variant
from matrixtool.model.reference import image_problem
from matrixtool.model.yamlfile import read_config_text

# The OCI image-spec digest grammar (descriptor.md, "Digests") for the registered algorithms: sha256 and sha512,
# lowercase hex of 64 and 128 characters.
DIGEST = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}")
# distribution/reference's tag grammar.
TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)


@dataclass(frozen=True, kw_only=True)
class Pushed:
    """One pushed per-platform image: ``ref`` its content-hash ref in the registry, ``digest`` the manifest
    digest the registry stored (``sha256:…``)."""

    variant: str
    platform: Platform
    ref: str
    digest: str

    @property
    def by_digest(self) -> str:
        """``<registry>/<repository>@<digest>``: the image exactly as pushed, whatever its tags say now."""
        name, _, tag = self.ref.partition("@")[0].rpartition(":")
        if not name or "/" in tag:  # no tag: the ':' belongs to a registry port
            name = self.ref.partition("@")[0]
        return f"{name}@{self.digest}"


@dataclass(frozen=True, kw_only=True)
class ManifestPlan:
    """The manifest list ``tags`` (``<registry>/<repository>/<name>:<version>``) over ``sources`` (one
    per-platform image by digest per entry of ``platforms``, in the same order)."""

    name: str
    tags: tuple[str, ...]
    sources: tuple[str, ...]
    platforms: tuple[Platform, ...]

    def argv(self) -> list[str]:
        """The ``docker buildx imagetools create`` command that makes (or replaces) the list."""
        argv = ["docker", "buildx", "imagetools", "create"]
        for tag in self.tags:
            argv += ["--tag", tag]
        return argv + list(self.sources)


# The part of a ``push --json`` document ``read_pushed`` reads.
PUSHED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["pushed"],
    "properties": {
        "pushed": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["variant", "platform", "refs", "digest"],
                "properties": {
                    "variant": {"type": "string"},
                    "platform": {"type": "string"},
                    "refs": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                    "digest": {"type": "string"},
                },
            },
        }
    },
}
MAX_PUSHED_BYTES = 16 * 1024 * 1024


def _read_json(path: Path, what: str) -> Any:
    """The JSON of the regular file ``path`` (never waited on when a FIFO). Raises ConfigError: not a regular file, over
    ``MAX_PUSHED_BYTES``, or not JSON (exit 3)."""
    text = read_config_text(path, limit=MAX_PUSHED_BYTES, what=what)
    try:
        return jsontext.loads(text)
    except ValueError as exc:
        raise ConfigError(str(path), [f"is not JSON ({exc}); pass {what}"]) from exc


def read_pushed(paths: Sequence[Path]) -> list[Pushed]:
    """Raises:
    ConfigError: a file is missing, not JSON, or not a ``push --json`` document (names the file).
    """
    found: list[Pushed] = []
    what = "a 'tools/matrix push --json' document"
    for path in paths:
        doc = _read_json(path, what)
        check_shape(doc, PUSHED_SCHEMA, source=str(path), what=what)
        try:
            records = doc["pushed"]
            found += [
                Pushed(
                    variant=r["variant"], platform=Platform.parse(r["platform"]), ref=r["refs"][0], digest=r["digest"]
                )
                for r in records
            ]
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise ConfigError(
                str(path),
                [f"not a 'tools/matrix push --json' document ({type(exc).__name__}: {exc}); pass the file push wrote"],
            ) from exc
    return found


def record_problems(
    variants: Sequence[Variant], pushed: Sequence[Pushed], *, registry: str, repository: str
) -> list[str]:
    """Why records of ``pushed`` cannot go into a manifest list of ``registry`` (empty: they can).

    A record is an input like any other: each must name one of its variant's platforms, a ref that is exactly
    ``<registry>/<repository>/<variant>:<tag>`` (what ``push`` writes; no other registry's or repository's image,
    nothing an argv could read as a flag) and a digest by the OCI grammar (``DIGEST``). ``variants`` must hold
    every record's variant.
    """
    by_name = {v.name: v for v in variants}
    problems = []
    for r in pushed:
        where = f"record of {r.variant} ({r.platform})"
        platforms = by_name[r.variant].platforms
        if r.platform not in platforms:
            known = ", ".join(map(str, platforms))
            problems.append(f"{where}: platform {str(r.platform)!r} is not one of {r.variant}'s ({known})")
        repo = remote_ref(registry, f"{repository}/{r.variant}")
        name, colon, tag = r.ref.rpartition(":")
        if image_problem(r.ref) is not None or name != repo or not colon or not TAG.fullmatch(tag):
            problems.append(
                f"{where}: ref {r.ref!r} is not {repo}:<tag>; a manifest list of {registry} is made only from "
                "images 'tools/matrix push --registry' put there: pass the records of that push"
            )
        if not DIGEST.fullmatch(r.digest):
            problems.append(f"{where}: digest {r.digest!r} is not sha256:<64 lowercase hex> (the OCI digest grammar)")
    return problems


def plan_manifests(
    variants: Sequence[Variant], pushed: Sequence[Pushed], *, registry: str, repository: str
) -> list[ManifestPlan]:
    """One manifest list per published name that ``pushed`` touches and that spans several platforms.

    Raises ConfigError: a record names no variant of the matrix or fails ``record_problems``, or members of one name pin
    different vLLM versions (the tag is the version); RegistryError: a member platform has no pushed record (push it,
    after its checks, first), or a record has no digest."""
    by_name = {v.name: v for v in variants}
    unknown = sorted({p.variant for p in pushed} - set(by_name))
    if unknown:
        raise ConfigError("push records", [f"variant {name!r} is not in the matrix" for name in unknown])
    problems = record_problems(variants, pushed, registry=registry, repository=repository)
    if problems:
        raise ConfigError("push records", problems)
    names = list(dict.fromkeys(by_name[p.variant].publish_name for p in pushed))
    plans = []
    for name in names:
        members = [v for v in variants if v.publish_name == name]
        wanted = [(v, platform) for v in members for platform in v.platforms]
        if len(wanted) < 2:
            continue  # one platform: push already made the tag
        versions = sorted({v.vllm.version for v in members})
        if len(versions) > 1:
            raise ConfigError(
                "matrix.yaml",
                [
                    f"variants published as {name!r} ({', '.join(v.name for v in members)}) pin vLLM "
                    f"{' and '.join(versions)}; one tag is one version: bump them together"
                ],
            )
        records = {(p.variant, p.platform): p for p in pushed}
        missing = [f"{v.name} ({platform})" for v, platform in wanted if (v.name, platform) not in records]
        if missing:
            raise RegistryError(
                f"{name}: no pushed image of {', '.join(missing)}; a multi-arch tag needs every platform: "
                f"run 'tools/matrix push' for it (after its checks passed) and pass its --json record",
                registry=registry,
            )
        sources = []
        for v, platform in wanted:
            sources.append(records[(v.name, platform)].by_digest)
        plans.append(
            ManifestPlan(
                name=name,
                tags=(remote_ref(registry, f"{repository}/{name}:{reference.version_tag(versions[0])}"),),
                sources=tuple(sources),
                platforms=tuple(platform for _, platform in wanted),
            )
        )
    return plans


def execute(plan: ManifestPlan) -> str:
    """Create the list (echoed), then read back its digest with ``docker buildx imagetools inspect``.

    Returns the manifest list's digest (``sha256:…``). Raises RegistryError: creating or inspecting failed (names the
    registry, the tag and the tool's output)."""
    tag = plan.tags[0]
    host = registry_host(tag)

    def failed(done: process.Completed) -> RegistryError:
        return RegistryError(
            f"'{' '.join(done.argv[:4])}' of {tag} failed (exit {done.returncode}); are the per-platform images "
            f"pushed, is registry {host} running, and are you logged in ('docker login {host}')?\n{done.tail(10)}",
            registry=host,
            ref=tag,
        )

    process.check(plan.argv(), error=failed)
    inspected = process.check(["docker", "buildx", "imagetools", "inspect", tag], error=failed)
    digest = next((line.split()[-1] for line in inspected.stdout.splitlines() if line.startswith("Digest:")), "")
    return digest
