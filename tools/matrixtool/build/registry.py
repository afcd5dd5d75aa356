"""Container registries, spoken to through the Docker engine (the Docker SDK): manifest digests, tags, pushes.

So ``docker login`` credentials, the engine's proxy, CA and insecure-registry settings apply, as for ``docker
pull``/``docker push``; loopback registries (127.0.0.0/8) are plain HTTP (the engine's default).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any, Protocol

import docker
import docker.auth
import docker.errors
import docker.utils

from matrixtool.core.errors import RegistryError
from matrixtool.core.process import echo
from matrixtool.model.model import Platform

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
SDK = "Docker SDK"


class Registry(Protocol):
    """What the tool asks of registries (and of the engine's tags on their behalf)."""

    def digest(self, ref: str) -> str | None:
        """The ``sha256:…`` manifest digest the registry of ``ref`` stores for it, or None when it has none. Raises
        RegistryError: the registry is unreachable or refused the request."""
        ...

    def tag(self, source: str, target: str) -> None:
        """Tag the engine's image ``source`` as ``target`` (``docker tag``)."""
        ...

    def push(self, ref: str) -> str:
        """Returns the manifest digest the registry stored. Raises RegistryError: the push failed (the message names the
        registry and the engine's reason)."""
        ...

    def untag(self, ref: str) -> None:
        """Remove the tag ``ref`` from the engine (the image stays under its other tags)."""
        ...


def registry_host(ref: str) -> str:
    """The registry part of ``ref`` as Docker resolves it: ``docker.io`` for ``debian:12``,
    ``127.0.0.1:5000`` for ``127.0.0.1:5000/x/y:z`` (``docker.auth.resolve_repository_name``)."""
    repository, _ = docker.utils.parse_repository_tag(ref)
    try:
        host, _ = docker.auth.resolve_repository_name(repository)
    except docker.errors.InvalidRepository:
        return repository.split("/", 1)[0]
    return str(host)


def _refused(ref: str, what: str, reason: str) -> RegistryError:
    host = registry_host(ref)
    unreachable = any(s in reason for s in ("connection refused", "no such host", "i/o timeout", "dial tcp"))
    detail = (
        f"registry {host} is unreachable ({reason}) while {what} {ref}; check the network, a proxy, or the "
        "--registry address"
        if unreachable
        else f"registry {host} refused {what} {ref} ({reason}); are you logged in ('docker login {host}')?"
    )
    return RegistryError(detail, registry=host, ref=ref)


@dataclass(frozen=True)
class EngineRegistry:
    """``Registry`` through ``client`` (Docker SDK): ``images.get_registry_data`` for digests (the engine's
    ``GET /distribution/<ref>/json``), ``images.push(stream=True, decode=True)`` for pushes, whose digest is
    the ``aux`` record's ``Digest``."""

    client: docker.DockerClient

    def digest(self, ref: str) -> str | None:
        echo(["docker", "buildx", "imagetools", "inspect", ref], via=SDK + ": images.get_registry_data")
        try:
            data = self.client.images.get_registry_data(ref)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            raise _refused(ref, "looking up", str(exc.explanation or exc)) from exc
        return str(data.id)

    def tag(self, source: str, target: str) -> None:
        echo(["docker", "tag", source, target], via=SDK)
        repository, tag = docker.utils.parse_repository_tag(target)
        self.client.images.get(source).tag(repository, tag)

    def push(self, ref: str) -> str:
        echo(["docker", "push", ref], via=SDK)
        repository, tag = docker.utils.parse_repository_tag(ref)
        digest = ""
        try:
            for record in self.client.images.push(repository, tag, stream=True, decode=True):
                digest = pushed_digest(record) or digest
                if "error" in record:
                    raise _refused(ref, "pushing", str(record.get("error")))
        except docker.errors.APIError as exc:
            raise _refused(ref, "pushing", str(exc.explanation or exc)) from exc
        if not digest:
            raise RegistryError(f"pushing {ref} reported no digest", registry=registry_host(ref), ref=ref)
        return digest

    def untag(self, ref: str) -> None:
        echo(["docker", "rmi", ref], via=SDK)
        with contextlib.suppress(docker.errors.ImageNotFound):
            self.client.images.remove(ref, noprune=True)


def pushed_digest(record: dict[str, Any]) -> str | None:
    """The digest in one decoded record of the engine's push stream: the ``aux`` record
    (``{"aux": {"Tag": …, "Digest": "sha256:…", "Size": …}}``), else None."""
    aux = record.get("aux")
    digest = aux.get("Digest") if isinstance(aux, dict) else None
    return str(digest) if isinstance(digest, str) and DIGEST.fullmatch(digest) else None


def pull_if_missing(client: docker.DockerClient, ref: str, *, platform: Platform | None = None) -> bool:
    """Pull ``ref`` unless the engine has it (of ``platform``, e.g. ``linux/arm64``, when given: from a multi-arch
    manifest list the engine pulls that platform's image); True when it was pulled. An image the engine has of another
    platform is kept when no registry has the wanted one (the caller's platform check then reports the mismatch). Raises
    RegistryError: pulling failed (the message names the registry, the ref and the engine's reason)."""
    local = False
    try:
        image = client.images.get(ref)
        local = True
        if platform is None or image.attrs.get("Architecture") == platform.arch:
            return False
    except docker.errors.ImageNotFound:
        pass
    echo(["docker", "pull", *(["--platform", str(platform)] if platform else []), ref], via=SDK)
    try:
        client.images.pull(ref, platform=str(platform) if platform else None)
    except docker.errors.APIError as exc:
        if local:  # the engine's own image, of another platform: the platform check names it (exit 12)
            return False
        host = registry_host(ref)
        raise RegistryError(
            f"{ref} is not on the engine and pulling it from {host} failed "
            f"({exc.explanation or exc}); build it, push it, or check the ref",
            registry=host,
            ref=ref,
        ) from exc
    return True
