"""Publish built images to a registry: the content-hash tag and the version tag, re-homed under
``--registry HOST[:PORT][/NAMESPACE]``.

``plan_push`` returns the exact ``docker tag``/``docker push`` commands; ``execute_push`` runs them
(the docker CLI, so ``docker login`` credentials and the engine's registry settings apply).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from matrixtool.engine import echo
from matrixtool.errors import RegistryError
from matrixtool.plan import BuildPlan
from matrixtool.registry import parse_ref, remote_ref

_PUSHED_DIGEST = re.compile(r"digest: (sha256:[0-9a-f]{64})")


@dataclass(frozen=True, kw_only=True)
class PushPlan:
    """Push ``source`` (the local content-hash ref) as each of ``targets`` (content-hash tag first)."""

    variant: str
    platform: str
    source: str
    targets: tuple[str, ...]

    def steps(self) -> list[list[str]]:
        """The commands, in order: every ``docker tag`` first, then every ``docker push``."""
        tags = [["docker", "tag", self.source, target] for target in self.targets]
        pushes = [["docker", "push", target] for target in self.targets]
        return tags + pushes

    def untag_steps(self) -> list[list[str]]:
        """``docker rmi`` of the registry tags (the image itself stays under its local tags)."""
        return [["docker", "rmi", target] for target in self.targets]


@dataclass(frozen=True, kw_only=True)
class PushResult:
    """A published image: ``refs`` in the registry and the manifest ``digest`` the registry stored."""

    variant: str
    platform: str
    refs: tuple[str, ...]
    digest: str


def plan_push(build_plan: BuildPlan, *, registry: str) -> PushPlan:
    """Publish the image of ``build_plan``: its tags (content hash, version) under ``registry``.

    Raises:
        RegistryError: ``registry`` is not ``HOST[:PORT][/NAMESPACE]``.
    """
    targets = tuple(remote_ref(registry, tag) for tag in build_plan.tags)
    return PushPlan(
        variant=build_plan.variant, platform=build_plan.platform, source=build_plan.hash_tag, targets=targets
    )


def pushed_digest(output: str) -> str | None:
    """The digest ``docker push`` printed (``<tag>: digest: sha256:… size: N``), or None."""
    found = _PUSHED_DIGEST.findall(output)
    return found[-1] if found else None


def execute_push(plan: PushPlan, *, keep_tags: bool = True) -> PushResult:
    """Run ``plan.steps()`` (each echoed); with ``keep_tags=False`` remove the registry tags afterwards.

    Raises:
        RegistryError: a command failed (the message names the registry, the ref and docker's output).
    """
    digest = ""
    for argv in plan.steps():
        echo(argv)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            host = parse_ref(argv[-1]).api_host
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
            raise RegistryError(
                f"'{' '.join(argv[:2])}' of {argv[-1]} failed (exit {proc.returncode}); "
                f"is registry {host} running, and are you logged in ('docker login {host}')?\n{tail}",
                registry=host,
                ref=argv[-1],
            )
        if argv[1] == "push":
            digest = pushed_digest(proc.stdout) or digest
    if not keep_tags:
        for argv in plan.untag_steps():
            echo(argv)
            subprocess.run(argv, capture_output=True, text=True, check=False)
    return PushResult(variant=plan.variant, platform=plan.platform, refs=plan.targets, digest=digest)
