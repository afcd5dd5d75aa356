"""A BuildKit cache kept in a registry, one reference per variant and platform:
``<registry>/<repository>/<variant>:buildcache-<arch>``.

Pull requests read it; the default branch writes it, so a pull request that changes only a test rebuilds
nothing and a vLLM bump reuses the torch layer (the template installs torch before vLLM).

Two ways to write, by the builder's driver (``docker buildx inspect``; https://docs.docker.com/build/cache/backends/):
- ``docker-container`` (and ``remote``/``kubernetes``) builders export the cache of every stage:
  ``cache-to type=registry,ref=…,mode=max``. Such a builder does not see the engine's images, so the base is
  passed as the matrix's registry ref (or ``ref@digest`` when pinned), not as a local per-platform tag.
- the ``docker`` driver (the engine's own BuildKit; engine 20.10's cannot export a cache to a registry: "cache
  export feature is currently not supported for docker driver") embeds the cache of the final stage in the
  image (``cache-to type=inline``), and ``export_inline`` pushes that image as the cache reference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from matrixtool.build.plan import BuildPlan, remote_ref
from matrixtool.build.registry import registry_host
from matrixtool.core import process
from matrixtool.core.errors import RegistryError

CACHE_TAG = "buildcache-{arch}"
# Drivers whose BuildKit can export a cache to a registry (all but the engine's own).
EXPORTING_DRIVERS = frozenset({"docker-container", "remote", "kubernetes"})


@dataclass(frozen=True, kw_only=True)
class CacheSettings:
    """``registry``: ``HOST[:PORT][/NAMESPACE]``; ``write`` false: read only (pull requests)."""

    registry: str
    write: bool
    driver: str

    @property
    def exports(self) -> bool:
        """Whether the builder writes the cache to the registry itself (``type=registry,mode=max``)."""
        return self.driver in EXPORTING_DRIVERS


def cache_ref(plan: BuildPlan, registry: str) -> str:
    """The cache reference of ``plan``: ``<registry>/<repository>/<variant>:buildcache-<arch>``. Raises RegistryError:
    ``registry`` is not ``HOST[:PORT][/NAMESPACE]``."""
    repository = plan.hash_ref.rpartition(":")[0]
    return remote_ref(registry, f"{repository}:{CACHE_TAG.format(arch=plan.arch)}")


def cache_options(plan: BuildPlan, settings: CacheSettings) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(cache_from, cache_to)`` values for ``docker buildx build --cache-from/--cache-to``.

    cache-from: the cache reference (a missing one is a cold cache, not an error). cache-to:
    ``type=registry,ref=…,mode=max`` where the builder exports (and ``write``), else ``type=inline``.
    """
    ref = cache_ref(plan, settings.registry)
    sources = (f"type=registry,ref={ref}",)
    if settings.exports:
        targets = (f"type=registry,ref={ref},mode=max",) if settings.write else ()
    else:
        targets = ("type=inline",)
    return sources, targets


def apply(plan: BuildPlan, settings: CacheSettings) -> BuildPlan:
    """``plan`` with its cache options; for an exporting builder also with the base as a registry ref
    (``base_local`` dropped: that builder cannot see the engine's local tags)."""
    cache_from, cache_to = cache_options(plan, settings)
    changes: dict[str, object] = {"cache_from": cache_from, "cache_to": cache_to}
    if settings.exports:
        changes["base_local"] = None
    return dataclasses.replace(plan, **changes)  # type: ignore[arg-type]


def export_steps(plan: BuildPlan, settings: CacheSettings) -> list[list[str]]:
    """The commands that write the cache of a finished build with the ``docker`` driver: tag the image
    (it carries its inline cache) as the cache reference, push it, untag. Empty where the builder exported
    the cache itself, or when ``write`` is off."""
    if settings.exports or not settings.write:
        return []
    ref = cache_ref(plan, settings.registry)
    return [["docker", "tag", plan.hash_ref, ref], ["docker", "push", ref], ["docker", "rmi", ref]]


def export_inline(plan: BuildPlan, settings: CacheSettings) -> None:
    """Raises RegistryError: the push failed (the message names the registry and the reference)."""
    for argv in export_steps(plan, settings):
        done = process.run(argv)
        if not done.ok and argv[1] != "rmi":
            host = registry_host(argv[-1])
            raise RegistryError(
                f"writing the build cache {argv[-1]} failed (exit {done.returncode}); is registry {host} running, "
                f"and are you logged in ('docker login {host}')?\n{done.tail(5)}",
                registry=host,
                ref=argv[-1],
            )


def builder_driver(argv: Sequence[str] = ("docker", "buildx", "inspect")) -> str:
    """The driver of the current buildx builder (``docker``, ``docker-container``, …), from ``Driver:`` of
    ``docker buildx inspect``; ``docker`` when it cannot tell (the engine's own builder)."""
    for line in process.run(argv, quiet=True).stdout.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Driver" and value.strip():
            return value.strip()
    return "docker"
