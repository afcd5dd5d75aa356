"""The smoke run as a plan, computed before any container starts: per profile, which checks run, in which
groups (one interpreter each) and order, with which timeouts, what the profile leaves out and why.

Pure functions of the variant, the selected checks (``CheckSpec``) and the chosen profiles; ``smoke.executor.execute``
runs a ``ProfileRun`` over a runner (``smoke.runners``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matrixtool.core.errors import WrongPlatformError
from matrixtool.incontainer.vllm_smoke.declarations import HOST_GROUP
from matrixtool.model import profiles
from matrixtool.model.checks import CHECKS, DEFAULT_SUITE
from matrixtool.model.conditions import Condition
from matrixtool.model.model import CheckSpec, Variant
from matrixtool.model.profiles import Profile

# Seconds between the in-container `timeout` and the host's own deadline.
KILL_GRACE = 10
HOST_SLACK = 30
LEFT_OUT_REASON = "no condition of this profile can change them"
# A profile's rerun of offline-generate runs its compiled engine with vLLM's process layout: the server of the
# serve check (compiled, engine core and worker processes, under the same conditions) stands for it.
SERVE_STANDS_FOR = "offline-generate"
SERVED_REASON = "the serve check's compiled server stands for it"


def groups(checks: Sequence[CheckSpec]) -> list[list[CheckSpec]]:
    """``checks`` split into the execs that run them: the checks of one declared group (``CheckInfo.group``) share
    an interpreter, in the given order; a check declared fresh gets one of its own; a check of ``HOST_GROUP`` runs
    on the host and in no exec. Ordered by the first check."""
    found: dict[str, list[CheckSpec]] = {}
    for check in checks:
        if CHECKS[check.name].group == HOST_GROUP:
            continue  # run by the host (serve), in no exec
        key = CHECKS[check.name].group or f"fresh:{check.name}"
        found.setdefault(key, []).append(check)
    return list(found.values())


def group_timeout(group: Sequence[CheckSpec]) -> int:
    """Seconds a group may take: its checks' timeouts summed."""
    return sum(c.timeout for c in group)


@dataclass(frozen=True, kw_only=True)
class Group:
    """The checks of one exec (one interpreter), in the order given; ``timeout``: their timeouts summed (s)."""

    checks: tuple[CheckSpec, ...]
    timeout: int

    @classmethod
    def of(cls, checks: Sequence[CheckSpec]) -> Group:
        """The group of ``checks`` with its timeout."""
        return cls(checks=tuple(checks), timeout=group_timeout(checks))

    @property
    def names(self) -> tuple[str, ...]:
        """The checks' names, in order."""
        return tuple(c.name for c in self.checks)

    @property
    def deadline_s(self) -> int:
        """The host's backstop (s): the group's timeout, coreutils ``timeout -k``'s grace, and some slack."""
        return self.timeout + KILL_GRACE + HOST_SLACK


@dataclass(frozen=True, kw_only=True)
class ProfileRun:
    """One container's worth of checks: ``checks`` in the order results are reported, ``groups`` in the order
    they start (the longest first; up to the runner's workers at once), ``left_out`` the names of the selected
    checks this profile does not run and ``left_out_reason`` why; ``rerun``: the checks ran under ``default`` in
    the same command already; ``log_stem``: the logs are ``<log_stem>.<check>.log``."""

    profile: Profile
    checks: tuple[CheckSpec, ...]
    groups: tuple[Group, ...]
    left_out: tuple[str, ...] = ()
    left_out_reason: str = ""
    rerun: bool = False
    suite: str = DEFAULT_SUITE
    log_stem: str

    @property
    def steps(self) -> tuple[CheckSpec, ...]:
        """The checks that run beside the groups, each by the runner's own means (``HOST_GROUP``: serve), in
        report order."""
        return tuple(c for c in self.checks if CHECKS[c.name].group == HOST_GROUP)

    def log_name(self, check: str) -> str:
        """The file name of ``check``'s log."""
        return f"{self.log_stem}.{check}.log"

    def describe(self, variant: str) -> str:
        """The line announcing this run: the profile, its conditions, what runs and what is left out."""
        line = f"[{variant}] profile {self.profile.name} ({self.profile.describe()}): "
        line += ", ".join(c.name for c in self.checks) if self.checks else "no check"
        if self.left_out:
            line += f"; left out, as {self.left_out_reason}: {', '.join(self.left_out)}"
        return line


@dataclass(frozen=True, kw_only=True)
class SmokePlan:
    """The smoke run of one variant: the selected ``checks`` and one ``ProfileRun`` per chosen profile, in order."""

    variant: str
    checks: tuple[CheckSpec, ...]
    runs: tuple[ProfileRun, ...]


def profile_run(
    variant: str,
    profile: Profile,
    checks: Sequence[CheckSpec],
    *,
    rerun: bool = False,
    suite: str = DEFAULT_SUITE,
    left_out: Sequence[CheckSpec] = (),
    reason: str = LEFT_OUT_REASON,
) -> ProfileRun:
    """The run of ``checks`` under ``profile``: grouped (``groups``), the longest group first (a stable sort);
    ``reason``: why ``left_out`` is left out."""
    ordered = sorted((Group.of(g) for g in groups(checks)), key=lambda g: g.timeout, reverse=True)
    return ProfileRun(
        profile=profile,
        checks=tuple(checks),
        groups=tuple(ordered),
        left_out=tuple(c.name for c in left_out),
        left_out_reason=reason if left_out else "",
        rerun=rerun,
        suite=suite,
        log_stem=variant if profile.name == profiles.DEFAULT else f"{variant}.{profile.name}",
    )


def plan_profiles(
    variant: Variant, checks: Sequence[CheckSpec], chosen: Sequence[Profile], suite: str = DEFAULT_SUITE
) -> SmokePlan:
    """The run of ``checks`` under each profile of ``chosen``, in order.

    With ``default`` among ``chosen`` it runs every check; another profile runs only the checks whose verdict a
    condition it changes can change (``checks.CheckInfo.affected_by``, ``profiles.checks_to_run``) and is a
    ``rerun``; without ``default`` every profile runs every check."""
    reference = next((p for p in chosen if p.name == profiles.DEFAULT), None)
    affects = {name: frozenset(map(Condition, info.affected_by)) for name, info in CHECKS.items()}
    runs = []
    for profile in chosen:
        run, left = profiles.checks_to_run(profile, reference, checks, affects)
        rerun = reference is not None and profile is not reference
        reason = LEFT_OUT_REASON
        if rerun and {"serve", SERVE_STANDS_FOR} <= {c.name for c in run}:
            served = [c for c in run if c.name == SERVE_STANDS_FOR]
            run = [c for c in run if c.name != SERVE_STANDS_FOR]
            reason = f"{LEFT_OUT_REASON}, or ({SERVE_STANDS_FOR}) {SERVED_REASON}" if left else SERVED_REASON
            left = [*left, *served]
        runs.append(profile_run(variant.name, profile, run, rerun=rerun, suite=suite, left_out=left, reason=reason))
    return SmokePlan(variant=variant.name, checks=tuple(checks), runs=tuple(runs))


def plan_host(variant: Variant, checks: Sequence[CheckSpec], suite: str = DEFAULT_SUITE) -> SmokePlan:
    """The run of ``checks`` on this machine (host mode): one run under ``default``'s name, no profile applied."""
    run = profile_run(variant.name, Profile(name=profiles.DEFAULT), checks, suite=suite)
    return SmokePlan(variant=variant.name, checks=tuple(checks), runs=(run,))


def check_params(variant: Variant, entrypoint: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON parameters every in-image check receives (the variant's expectations)."""
    return {
        "variant": variant.name,
        "accelerator": variant.accelerator.value,
        "torch_build": variant.torch_build.value,
        "triton": variant.triton.value,
        "triton_distribution": variant.triton_distribution,
        "gpu_archs": list(variant.gpu_archs),
        "vllm_version": variant.vllm.version,
        "torch_version": variant.torch.version,
        "max_tokens": 8,
        "exclude": list(variant.index.exclude),
        "overrides": list(variant.index.overrides),
        "accept_clashes": list(variant.accept_clashes),
        "entrypoint": list(entrypoint),
        "cuda_weight_reason": variant.cuda_weight_reason,
        "features_promise": list(variant.features_promise),
        "features_leave_out": dict(variant.features_leave_out),
        "ready_budget_s": variant.ready_budget_s,
    }


def image_platform(attrs: Mapping[str, Any]) -> str:
    """``os/architecture[/variant]`` of an image from its ``docker image inspect`` attributes."""
    parts = [str(attrs.get("Os") or "linux"), str(attrs.get("Architecture") or "unknown")]
    if attrs.get("Variant"):
        parts.append(str(attrs["Variant"]))
    return "/".join(parts)


def platform_matches(image_platform_: str, platforms: Sequence[str]) -> bool:
    """True when ``image_platform_`` is one of ``platforms``; arm64's ``v8`` and amd64's ``v1`` are implied."""

    def norm(p: str) -> str:
        return p.removesuffix("/v8") if p.startswith("linux/arm64") else p.removesuffix("/v1")

    return norm(image_platform_) in {norm(p) for p in platforms}


def check_platform(image: str, attrs: Mapping[str, Any], variant: Variant) -> None:
    """Raise WrongPlatformError (exit 12) when ``image``'s platform is not one of ``variant``'s platforms.

    Runs before any container starts: under QEMU a wrong-architecture image would otherwise pass checks
    that prove nothing about the variant's platform (an amd64 image once passed every check ``--as arm64``).
    """
    got = image_platform(attrs)
    platforms = [str(p) for p in variant.platforms]
    if not platform_matches(got, platforms):
        raise WrongPlatformError(
            f"image {image} is {got}, but variant {variant.name} is built for {', '.join(platforms)}; "
            f"test it --as a variant of platform {got}, or build {variant.name} "
            f"(tools/matrix build {variant.name}) and test that image"
        )
