"""Push built images to a registry: the content-hash tag and the version tag, re-homed under
``--registry HOST[:PORT][/NAMESPACE]``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from matrixtool.build.plan import BuildPlan, remote_ref
from matrixtool.build.registry import Registry
from matrixtool.model.model import Platform


@dataclass(frozen=True, kw_only=True)
class PushPlan:
    """Push ``source`` (the local content-hash ref) as each of ``targets`` (content-hash tag first)."""

    variant: str
    platform: Platform
    source: str
    targets: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class PushResult:
    """A published image: ``refs`` in the registry and the manifest ``digest`` the registry stored."""

    variant: str
    platform: Platform
    refs: tuple[str, ...]
    digest: str


def plan_push(build_plan: BuildPlan, *, registry: str) -> PushPlan:
    """Raises RegistryError: ``registry`` is not ``HOST[:PORT][/NAMESPACE]``."""
    targets = tuple(remote_ref(registry, ref) for ref in build_plan.refs)
    return PushPlan(
        variant=build_plan.variant, platform=build_plan.platform, source=build_plan.hash_ref, targets=targets
    )


def execute_push(plan: PushPlan, registry: Registry, *, keep_tags: bool = True) -> PushResult:
    """With ``keep_tags=False`` the tags are removed afterwards, also when a push failed. ``digest``: the last push's
    (every target names the same image). Raises RegistryError: a push failed (the message names the registry, the ref
    and the engine's reason)."""
    digest = ""
    try:
        for target in plan.targets:
            registry.tag(plan.source, target)
        for target in plan.targets:
            digest = registry.push(target)
    finally:
        if not keep_tags:
            for target in plan.targets:
                registry.untag(target)
    return PushResult(variant=plan.variant, platform=plan.platform, refs=plan.targets, digest=digest)


def ensure_published(
    plan: PushPlan,
    digest: str,
    registry: Registry,
    pull: Callable[[str, Platform], object],
    *,
    keep_tags: bool = True,
) -> PushResult:
    """Publish an image the registry has already under its content-hash tag but the engine did not build: CI's image job
    skips such a build (``build --registry``), and its push step must still report the image, for the multi-arch
    ``manifest`` job. A version tag that does not name ``digest`` is re-pointed (pulled, tagged, pushed: only the tag
    moves). Raises RegistryError: the registry did not answer, or a pull or push failed."""
    source = plan.targets[0]
    stale = [t for t in plan.targets[1:] if registry.digest(t) != digest]
    if stale:
        pull(source, plan.platform)
        for target in stale:
            registry.tag(source, target)
        for target in stale:
            registry.push(target)
        if not keep_tags:
            for target in stale:
                registry.untag(target)
    return PushResult(variant=plan.variant, platform=plan.platform, refs=plan.targets, digest=digest)
