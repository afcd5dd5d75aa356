"""The one preflight of the commands that build or plan (``build``, ``run``, ``bake``, ``push``), in this order:
a fresh render of ``images/``, each variant's local inputs, each variant's package index, then the engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import docker

from matrixtool.build import drift, hostfiles, index, render
from matrixtool.build import wheelhouse as wheelhouses
from matrixtool.core import engine, http
from matrixtool.core.errors import ConfigError, EngineUnreachableError, IndexUnreachableError, MatrixError
from matrixtool.model import builds
from matrixtool.model.model import Matrix, Variant


class IndexProbe(Enum):
    """What an index that does not answer means for a command."""

    FAIL = "fail"  # an error (exit 10): the build would hang on it
    # build/run: probed first, an error (exit 10) only for a variant that needs a build (``Resolved.unreachable``);
    # without an engine the first one is raised, as for FAIL.
    DEFER = "defer"
    WARN = "warn"  # a warning (bake: the builder that runs the bake file needs the index, not this machine)
    SKIP = "skip"  # not probed (push: installs nothing)


class EngineNeed(Enum):
    """Whether a command needs the Docker engine."""

    REQUIRED = "required"  # no engine answers: EngineUnreachableError (exit 8)
    OPTIONAL = "optional"  # no engine answers: ``Resolved.client`` is None and a warning says so elsewhere


@dataclass(frozen=True, kw_only=True)
class Needs:
    """What a command needs checked. ``keep_going``: a variant's own failure (inputs, index) is recorded in
    ``Resolved.failed`` and the others go on, and variants whose platforms the builder cannot build are
    recorded in ``Resolved.skipped``; the engine is then reached before the variants are checked."""

    index: IndexProbe = IndexProbe.FAIL
    engine: EngineNeed = EngineNeed.REQUIRED
    keep_going: bool = False


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """The resolved inputs shared by every variant: CA bundle and wheelhouse (flag, else environment), and the
    environment whose proxy variables the index probes use (``core.http``)."""

    ca_cert: Path | None
    wheelhouse: Path | None
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def resolve(cls, *, ca_cert: Path | None, wheelhouse: Path | None, env: Mapping[str, str]) -> Inputs:
        """The flags ``--ca-cert``/``--wheelhouse``, else the variables of ``env`` (``hostfiles.resolve_*``)."""
        return cls(
            ca_cert=hostfiles.resolve_ca_cert(ca_cert, env),
            wheelhouse=hostfiles.resolve_wheelhouse(wheelhouse, env),
            env=env,
        )


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """``client`` None: ``EngineNeed.OPTIONAL`` and no engine answers; ``unreachable``: under ``IndexProbe.DEFER``,
    each variant's index error, for ``index_error`` to raise if the variant needs a build."""

    inputs: Inputs
    client: docker.DockerClient | None
    variants: Sequence[Variant]
    failed: Mapping[str, MatrixError] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)
    warnings: Sequence[str] = ()
    unreachable: Mapping[str, IndexUnreachableError] = field(default_factory=dict)

    def index_error(self, variant: str, *, needs_build: bool) -> IndexUnreachableError | None:
        """The deferred index error of ``variant`` when it ``needs_build`` (else None: nothing will install)."""
        return self.unreachable.get(variant) if needs_build else None

    def planning_error(self, variant: str, error: MatrixError) -> MatrixError:
        """What to report when ``variant`` cannot even be planned (``error``: its base image cannot be provided):
        its deferred index error where its index does not answer (a variant with no plan has no image, so it
        needs a build, and an unreachable index is the cause to fix first, as without deferral), else ``error``."""
        return self.unreachable.get(variant) or error

    def engine(self) -> docker.DockerClient:
        """The engine client of a command that required one (``EngineNeed.REQUIRED``)."""
        assert self.client is not None, "the preflight of an EngineNeed.REQUIRED command connects or raises"
        return self.client


def check_fresh(matrix: Matrix) -> None:
    """Raise ``StaleRenderError`` when ``images/`` next to the matrix file is not a fresh render of it."""
    drift.check_fresh(render.render_matrix(matrix), matrix.root)


def check_inputs(variant: Variant, inputs: Inputs) -> None:
    """Check ``variant``'s local inputs: the CA bundle is a file; a wheelhouse variant has a wheelhouse holding its
    torch wheel; its vLLM, torch and Triton resolve to builds of its accelerator and, with its base image, of one
    CUDA or ROCm version (``builds``). Raises ConfigError: every problem found, each with what to pass instead."""
    wheelhouse, ca_cert = inputs.wheelhouse, inputs.ca_cert
    problems = []
    if ca_cert is not None and not ca_cert.is_file():
        problems.append(
            f"CA bundle {ca_cert} (from --ca-cert or {'/'.join(http.CA_ENV_VARS)}) is not a file; "
            "pass --ca-cert FILE or unset the variable"
        )
    # Each platform needs a wheel whose tags fit it and the variant's Python (wheelhouse.py), not any torch wheel.
    problems += wheelhouses.problems(variant, wheelhouse, env_var=hostfiles.WHEELHOUSE_ENV_VAR)
    problems += builds.foreign_builds(variant)
    problems += builds.toolkit_mismatches(variant)
    if problems:
        raise ConfigError(f"inputs of variant {variant.name}", problems)


def unreachable_indexes(variant: Variant, inputs: Inputs) -> list[tuple[str, str]]:
    """``(url, reason)`` for each of ``variant``'s package indexes that does not answer a probe
    (``index.probe``, at most ``index.PROBE_TIMEOUT`` seconds each)."""
    found = []
    for url in (variant.index.url, *variant.index.extra_urls):
        problem = index.probe(url, ca_cert=inputs.ca_cert, env=inputs.env, timeout=index.PROBE_TIMEOUT)
        if problem is not None:
            found.append((url, problem))
    return found


def check_index(variant: Variant, inputs: Inputs, probe: IndexProbe) -> list[str]:
    """Probe ``variant``'s package indexes as ``probe`` says; returns the warnings (``IndexProbe.WARN``). Raises
    IndexUnreachableError (``IndexProbe.FAIL``): naming the index and the ways out (a wheelhouse, or another index in
    matrix.yaml)."""
    if probe is IndexProbe.SKIP:
        return []
    found = unreachable_indexes(variant, inputs)
    if probe is IndexProbe.WARN:
        return [
            f"{variant.name}: package index {url} does not answer from this machine ({problem}); "
            "the bake file does not need it here, the builder that runs it does"
            for url, problem in found
        ]
    for url, problem in found[:1]:
        # --wheelhouse is a way out only where the variant takes one (matrix.yaml index.wheelhouse).
        wheelhouse = (
            f"pass --wheelhouse DIR holding the wheels ({variant.torch.requirement} and what it needs), or "
            if variant.index.wheelhouse
            else ""
        )
        raise IndexUnreachableError(
            f"variant {variant.name}: package index {url} is unreachable from this machine ({problem}); "
            f"the build would hang on it. Ways out: {wheelhouse}point variants.{variant.name}.index.url "
            "in matrix.yaml at a mirror you can reach, then 'tools/matrix render'"
        )
    return []


def _connect(need: EngineNeed) -> docker.DockerClient | None:
    if need is EngineNeed.REQUIRED:
        return engine.connect()
    try:
        return engine.connect()
    except EngineUnreachableError:
        return None


def preflight(matrix: Matrix, variants: Sequence[Variant], inputs: Inputs, needs: Needs) -> Resolved:
    """Under ``needs.keep_going`` the engine comes first, then the builder's platforms, then each variant, recording its
    failure instead of raising it. Raises StaleRenderError; EngineUnreachableError (``EngineNeed.REQUIRED``); without
    ``keep_going`` also ConfigError (inputs) and IndexUnreachableError."""
    check_fresh(matrix)
    probe = IndexProbe.FAIL if needs.index is IndexProbe.DEFER else needs.index
    unreachable: dict[str, IndexUnreachableError] = {}

    def indexes(variant: Variant) -> list[str]:
        try:
            return check_index(variant, inputs, probe)
        except IndexUnreachableError as exc:
            if needs.index is not IndexProbe.DEFER:
                raise
            unreachable[variant.name] = exc
            return []

    if not needs.keep_going:
        for variant in variants:
            check_inputs(variant, inputs)
        warnings = [line for variant in variants for line in indexes(variant)]
        try:
            client = _connect(needs.engine)
        except EngineUnreachableError:
            if unreachable:  # no engine to tell what is built: the index error, as without DEFER
                raise next(iter(unreachable.values())) from None
            raise
        return Resolved(inputs=inputs, client=client, variants=variants, warnings=warnings, unreachable=unreachable)
    client = _connect(needs.engine)
    can = engine.builder_platforms()
    skipped: dict[str, str] = {}
    for v in variants:
        missing = [str(p) for p in v.platforms if str(p) not in can]
        if missing:
            skipped[v.name] = f"this builder cannot build {', '.join(missing)} (see 'tools/matrix doctor')"
    failed: dict[str, MatrixError] = {}
    passed: list[Variant] = []
    warnings = []
    for variant in (v for v in variants if v.name not in skipped):
        try:
            check_inputs(variant, inputs)
            warnings += indexes(variant)
        except MatrixError as exc:
            failed[variant.name] = exc
            engine.note(f"[{variant.name}] error: {exc}")
        else:
            passed.append(variant)
    return Resolved(
        inputs=inputs,
        client=client,
        variants=passed,
        failed=failed,
        skipped=skipped,
        warnings=warnings,
        unreachable=unreachable,
    )
