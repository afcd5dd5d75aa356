"""One tag, several architectures: publish variants that are the same stack on different platforms
(matrix.yaml ``publish_as``: ``arm64`` is published as ``cpu``) under one name, as a multi-arch manifest list.

The inputs are the records ``tools/matrix push --json`` wrote after each per-platform image passed its checks
(the image's content-hash ref and the digest the registry stored), as CI's per-runner jobs hand them to one
merge job; the list is made from those digests with ``docker buildx imagetools create``, which copies across
repositories of one registry and speaks to it with the docker CLI's credentials
(https://docs.docker.com/build/ci/github-actions/multi-platform/, "Distribute build across multiple runners").
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matrixtool.engine import echo
from matrixtool.errors import ConfigError, RegistryError
from matrixtool.matrix import Platform, Variant
from matrixtool.plan import remote_ref
from matrixtool.registry import registry_host


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


def read_pushed(paths: Sequence[Path]) -> list[Pushed]:
    """The ``pushed`` records of ``tools/matrix push --json`` documents.

    Raises:
        ConfigError: a file is missing, not JSON, or not such a document (names the file).
    """
    found: list[Pushed] = []
    for path in paths:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
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


def plan_manifests(
    variants: Sequence[Variant], pushed: Sequence[Pushed], *, registry: str, repository: str
) -> list[ManifestPlan]:
    """One manifest list per published name that ``pushed`` touches and that spans several platforms.

    ``variants``: every variant of the matrix (a name's members are all variants published under it).

    Raises:
        ConfigError: a record names no variant of the matrix, or members of one name pin different vLLM
            versions (the tag is the version).
        RegistryError: a member platform has no pushed record (push it, after its checks, first), or a record
            has no digest.
    """
    by_name = {v.name: v for v in variants}
    unknown = sorted({p.variant for p in pushed} - set(by_name))
    if unknown:
        raise ConfigError("push records", [f"variant {name!r} is not in the matrix" for name in unknown])
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
            record = records[(v.name, platform)]
            if not record.digest:
                raise RegistryError(f"push record of {v.name} ({platform}) has no digest", ref=record.ref)
            sources.append(record.by_digest)
        plans.append(
            ManifestPlan(
                name=name,
                tags=(remote_ref(registry, f"{repository}/{name}:{versions[0]}"),),
                sources=tuple(sources),
                platforms=tuple(platform for _, platform in wanted),
            )
        )
    return plans


def execute(plan: ManifestPlan) -> str:
    """Create the list (echoed), then read back its digest with ``docker buildx imagetools inspect``.

    Returns the manifest list's digest (``sha256:…``).

    Raises:
        RegistryError: creating or inspecting failed (names the registry, the tag and the tool's output).
    """
    tag = plan.tags[0]
    host = registry_host(tag)
    for argv in (plan.argv(), ["docker", "buildx", "imagetools", "inspect", tag]):
        echo(argv)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
            raise RegistryError(
                f"'{' '.join(argv[:4])}' of {tag} failed (exit {proc.returncode}); are the per-platform images "
                f"pushed, is registry {host} running, and are you logged in ('docker login {host}')?\n{tail}",
                registry=host,
                ref=tag,
            )
    digest = next((line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("Digest:")), "")
    return digest
