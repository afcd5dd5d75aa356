"""Provide a variant's base image: local, else pulled, else a Debian stand-in made with debootstrap.

The stand-in is tagged with the upstream ref it replaces, so builds never need a registry: with the
docker driver BuildKit uses a local image before it tries a registry. This is also the air-gapped path.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
from docker.models.images import Image

from matrixtool.build.pin import Lock
from matrixtool.core import outputs, process
from matrixtool.core.errors import BuildError
from matrixtool.model import reference
from matrixtool.model.model import Platform, Variant

DEFAULT_MIRROR = "http://deb.debian.org/debian"
STAND_IN_LABEL = "io.vllm-matrix.stand-in-for"
SUITE_LABEL = "io.vllm-matrix.debian-suite"
# debootstrap's (and the engine's ``Architecture``) name for each OCI architecture a stand-in can be made for.
DEBIAN_ARCH = {"amd64": "amd64", "arm64": "arm64"}


def platform_tag(ref: str, platform: Platform) -> str:
    """A local tag for ``ref``'s image of ``platform``: ``debian:bookworm-slim`` -> ``debian:bookworm-slim-arm64``.

    The classic image store keeps one image per tag, so the amd64 and arm64 bases of one ref would replace
    each other (and race under ``make images -j``); each platform's base is built from its own tag.
    """
    return reference.suffixed_tag(ref, platform.arch)


@dataclass(frozen=True, kw_only=True)
class BaseImage:
    """``stand_in_suite``: the Debian suite when the image is a stand-in (read from its label, so a stand-in made
    by an earlier run is recognised too), else None."""

    ref: str
    platform: Platform
    image_id: str
    origin: str
    local_tag: str | None = None
    stand_in_suite: str | None = None


# The key of a base image among a command's: (variant name, platform).
BaseKey = tuple[str, Platform]


def _suite_of(image: Image) -> str | None:
    labels = (image.attrs.get("Config") or {}).get("Labels") or {}
    return labels.get(SUITE_LABEL) if STAND_IN_LABEL in labels else None


def _local(client: docker.DockerClient, ref: str, platform: Platform) -> Image | None:
    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    arch = DEBIAN_ARCH.get(platform.arch, platform.arch)
    return image if image.attrs.get("Architecture") == arch else None


def stand_in_argv(*, suite: str, arch: str, rootfs: Path, mirror: str) -> list[str]:
    """The debootstrap command that makes a minimal Debian ``suite`` rootfs for ``arch``."""
    return ["debootstrap", "--variant=minbase", f"--arch={arch}", suite, str(rootfs), mirror]


def stand_in_dockerfile(ref: str, suite: str) -> str:
    """The Dockerfile that turns ``rootfs.tar`` into an image standing in for ``ref``."""
    return f'FROM scratch\nADD rootfs.tar /\nLABEL {STAND_IN_LABEL}="{ref}" {SUITE_LABEL}="{suite}"\nCMD ["bash"]\n'


def make_stand_in(
    ref: str, *, platform: Platform, suite: str, mirror: str = DEFAULT_MIRROR, native: bool = True
) -> None:
    """debootstrap ``suite`` for ``platform`` and build it as ``platform_tag(ref, platform)`` and, when ``platform`` is
    the engine's own (``native``), as ``ref`` too: a foreign-arch stand-in must not take over the plain tag that
    ``docker run ref`` uses. About 30 s native, 1.5 min for arm64 under QEMU. Raises BuildError: debootstrap or the
    image build failed (the message has the command's last output)."""
    arch = DEBIAN_ARCH.get(platform.arch) if platform.os == "linux" else None
    if arch is None:
        raise BuildError(f"no stand-in for platform {platform}; supported: linux/{', linux/'.join(DEBIAN_ARCH)}")
    with tempfile.TemporaryDirectory(prefix="matrix-base-") as tmp:
        work = Path(tmp)
        rootfs = work / "rootfs"
        steps = [
            stand_in_argv(suite=suite, arch=arch, rootfs=rootfs, mirror=mirror),
            ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(work / "rootfs.tar"), "."],
        ]
        for argv in steps:
            _check_call(argv, what=f"making the stand-in for {ref}")
        outputs.write_text(work / "Dockerfile", stand_in_dockerfile(ref, suite))
        process.run(["rm", "-rf", str(rootfs)], quiet=True)
        _check_call(
            [
                "docker",
                "buildx",
                "build",
                "--progress=plain",
                "--load",
                "--platform",
                str(platform),
                "--tag",
                platform_tag(ref, platform),
                *(["--tag", ref] if native else []),
                str(work),
            ],
            what=f"building the stand-in image {ref}",
        )


def _check_call(argv: list[str], *, what: str) -> None:
    process.check(
        argv, error=lambda done: BuildError(f"{what} failed: '{argv[0]}' exited {done.returncode}:\n{done.tail(15)}")
    )


def provide(
    client: docker.DockerClient,
    ref: str,
    *,
    platform: Platform,
    suite: str | None,
    mirror: str = DEFAULT_MIRROR,
    digest: str | None = None,
) -> BaseImage:
    """Make sure ``ref`` exists locally for ``platform``: use it, else pull it, else make a stand-in.

    With ``digest`` (pinned in the lock file) only ``ref@digest`` will do: it is used when local, else pulled; a
    stand-in cannot satisfy a pin, so a failed pull is an error. Raises BuildError: the stand-in could not be made, or a
    pinned base could not be pulled."""
    if digest:
        return _provide_pinned(client, f"{ref}@{digest}", platform=platform)
    alias = platform_tag(ref, platform)
    image = _local(client, alias, platform) or _local(client, ref, platform)
    if image is not None:
        image.tag(*alias.rsplit(":", 1))
        return BaseImage(
            ref=ref,
            platform=platform,
            image_id=str(image.id),
            origin="local",
            local_tag=alias,
            stand_in_suite=_suite_of(image),
        )
    process.echo(["docker", "pull", "--platform", str(platform), ref])
    try:
        client.images.pull(ref, platform=str(platform))
        origin = "pulled"
    except docker.errors.APIError as exc:
        if suite is None:
            raise BuildError(
                f"{ref} ({platform}) is not on the engine, pulling it failed ({exc.explanation or exc}), and the "
                "variant declares no stand_in (no Debian suite ships its Python); reach the registry, or load the "
                "image with 'docker load'"
            ) from exc
        print(
            f"  pull failed ({exc.explanation or exc}); making a Debian {suite} stand-in",
            file=sys.stderr,
            flush=True,
        )
        native = platform == Platform("linux", str(client.version().get("Arch", "")))
        make_stand_in(ref, platform=platform, suite=suite, mirror=mirror, native=native)
        origin = "stand-in"
    image = _local(client, alias, platform) or _local(client, ref, platform)
    if image is None:
        raise BuildError(f"{ref} for {platform} is still missing after {origin}; run 'tools/matrix doctor'")
    image.tag(*alias.rsplit(":", 1))
    return BaseImage(
        ref=ref,
        platform=platform,
        image_id=str(image.id),
        origin=origin,
        local_tag=alias,
        stand_in_suite=_suite_of(image),
    )


def lookup(client: docker.DockerClient, ref: str, *, platform: Platform, digest: str | None = None) -> BaseImage | None:
    """The base image ``ref`` (``ref@digest`` when pinned) for ``platform`` if the engine has it, else None.

    Looks only: nothing is pulled, made or tagged (``bake`` exports for other builders and changes nothing here).
    ``local_tag`` is the per-platform tag (``platform_tag``) only when that tag exists.
    """
    if digest:
        pinned = f"{ref}@{digest}"
        image = _local(client, pinned, platform)
        return (
            None if image is None else BaseImage(ref=pinned, platform=platform, image_id=str(image.id), origin="local")
        )
    alias = platform_tag(ref, platform)
    by_alias = _local(client, alias, platform)
    image = by_alias or _local(client, ref, platform)
    if image is None:
        return None
    return BaseImage(
        ref=ref,
        platform=platform,
        image_id=str(image.id),
        origin="local",
        local_tag=alias if by_alias is not None else None,
        stand_in_suite=_suite_of(image),
    )


def _provide_pinned(client: docker.DockerClient, pinned: str, *, platform: Platform) -> BaseImage:
    image = _local(client, pinned, platform)
    origin = "local"
    if image is None:
        process.echo(["docker", "pull", "--platform", str(platform), pinned])
        try:
            client.images.pull(pinned, platform=str(platform))
        except docker.errors.APIError as exc:
            raise BuildError(
                f"the pinned base {pinned} ({platform}) is not on the engine and pulling it failed "
                f"({exc.explanation or exc}); a stand-in cannot match a digest: reach its registry, "
                "or run 'tools/matrix pin' again, or remove the entry from matrix.lock.json"
            ) from exc
        origin = "pulled"
        image = _local(client, pinned, platform)
        if image is None:
            raise BuildError(f"{pinned} has no {platform} image; pin a ref that serves {platform}")
    return BaseImage(ref=pinned, platform=platform, image_id=str(image.id), origin=origin)


def provide_bases(client: docker.DockerClient, variants: Sequence[Variant], lock: Lock) -> dict[BaseKey, BaseImage]:
    """Raises BuildError: a base could not be provided (``provide``)."""
    return {
        (v.name, p): provide(client, v.base_image, platform=p, suite=v.stand_in_suite, digest=lock.digest(v.base_image))
        for v in variants
        for p in v.platforms
    }


def look_up_bases(
    client: docker.DockerClient | None, variants: Sequence[Variant], lock: Lock
) -> tuple[dict[BaseKey, BaseImage], list[str]]:
    """The bases the engine already has (``lookup``; nothing pulled or made), and a warning for each one it
    lacks, or one warning when there is no engine (``client`` None)."""
    if client is None:
        return {}, ["no Docker engine: base images were not checked; the bake file names them as matrix.yaml does"]
    found: dict[BaseKey, BaseImage] = {}
    warnings = []
    for v in variants:
        digest = lock.digest(v.base_image)
        for p in v.platforms:
            got = lookup(client, v.base_image, platform=p, digest=digest)
            if got is not None:
                found[(v.name, p)] = got
            else:
                named = f"{v.base_image}@{digest}" if digest else v.base_image
                warnings.append(
                    f"{v.name} ({p}): base image {named} is not on the engine; "
                    "the bake file builds FROM it as named, and its content hash differs from a local build's "
                    "('tools/matrix base' provides it)"
                )
    return found, warnings
