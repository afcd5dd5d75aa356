"""Execute a ``BuildPlan``: stage the build context, run BuildKit, stream and save the log."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import requests.exceptions

from matrixtool.build import cache
from matrixtool.build.plan import CONTENT_HASH_LABEL, BuildPlan, BuildResult, build_spec, buildx_argv, remote_ref
from matrixtool.build.registry import EngineRegistry, Registry
from matrixtool.core import engine, outputs, process
from matrixtool.core.engine import note
from matrixtool.core.errors import BuildError, EngineUnreachableError
from matrixtool.core.untrusted import shown


def untagged(argv: list[str]) -> list[str]:
    """``argv`` of ``docker buildx build`` without its ``--tag``/``-t`` options.

    The tags are set by ``tag_built`` once the build has succeeded: a build that is interrupted (its
    client ended, while the engine may still finish and load the image) then never leaves a tag behind.
    """
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--tag", "-t"):
            skip = True
        elif not arg.startswith("--tag="):
            out.append(arg)
    return out


def tag_built(client: docker.DockerClient, image_id: str, tags: tuple[str, ...]) -> None:
    """Tag the image ``image_id`` (from ``--iidfile``) with each full ref of ``tags`` (``repo:tag``)."""
    image = client.images.get(image_id)
    for ref in tags:
        repository, _, tag = ref.rpartition(":")
        image.tag(repository, tag)


def stage_context(plan: BuildPlan, context_dir: Path) -> None:
    """Wheels are hard-linked when the filesystem allows (no copy of a 200 MB torch wheel), else copied."""
    with outputs.guarded(context_dir):
        if context_dir.exists():
            shutil.rmtree(context_dir)
        context_dir.mkdir(parents=True)
    try:
        for f in plan.files:
            outputs.write_text(context_dir / f.path.name, f.text)
        if plan.wheelhouse is not None:
            target = context_dir / "wheelhouse"
            with outputs.guarded(target):
                target.mkdir()
            for wheel in sorted(plan.wheelhouse.iterdir()):
                if wheel.is_file():
                    with outputs.guarded(target / wheel.name):
                        try:
                            os.link(wheel, target / wheel.name)
                        except OSError:
                            shutil.copy2(wheel, target / wheel.name)
    except BaseException:
        shutil.rmtree(context_dir, ignore_errors=True)  # no half-staged context for a later build to use
        raise


def failure(
    plan: BuildPlan, tail: Sequence[str], *, seconds: float, log_path: Path, data_root: str | None
) -> BuildError | EngineUnreachableError:
    """The error of a ``docker buildx build`` that exited non-zero, from the last lines of its output (``tail``):
    the engine went away under it (``engine.lost_line``: exit 8), its disk is full (``engine.no_space_line``:
    exit 6 naming the engine's data root and how to free it), else the build failed (exit 6). Each names the log."""
    what = f"{plan.variant} ({plan.platform})"
    last = "\n".join(tail)
    lost = engine.lost_line(tail)
    if lost is not None:
        return EngineUnreachableError(
            engine.gone_message(
                os.environ,
                f"the build of {what} after {seconds:.0f} s",
                lost.strip(),
                tagged="this build tagged nothing",
            )
            + f"; full log: {log_path}"
        )
    full = engine.no_space_line(tail)
    if full is not None:
        where = f"the engine's data root {data_root}" if data_root else "the engine's data root"
        return BuildError(
            f"building {what} failed after {seconds:.0f} s: no space left on device on {where}; free space there "
            "('docker builder prune', 'docker image prune') or give the engine a larger disk, then rerun; "
            f"full log: {log_path}\n{full.strip()}"
        )
    return BuildError(f"building {what} failed after {seconds:.0f} s; full log: {log_path}\n{last}")


def _data_root(client: docker.DockerClient) -> str | None:
    """The engine's ``DockerRootDir`` (where its images and BuildKit's snapshots live), None when it does not
    answer."""
    try:
        return str(client.info().get("DockerRootDir") or "") or None
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return None


def _image_size(client: docker.DockerClient, ref: str) -> tuple[str, int]:
    image = client.images.get(ref)
    return str(image.id), int(image.attrs.get("Size", 0))


def existing(client: docker.DockerClient, plan: BuildPlan) -> BuildResult | None:
    """The result of an earlier build with the same content hash: its tag is on the engine, and the image it
    names carries that hash in its label ``io.vllm-matrix.content-hash`` (a build of this plan's inputs, not
    any image tagged so by hand, which is built over)."""
    try:
        image = client.images.get(plan.hash_ref)
    except docker.errors.ImageNotFound:
        return None
    labels = (image.attrs.get("Config") or {}).get("Labels") or {}
    if not isinstance(labels, dict) or labels.get(CONTENT_HASH_LABEL) != plan.content_hash:
        return None
    image_id, size = str(image.id), image.attrs.get("Size", 0)
    size = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0
    return BuildResult(
        variant=plan.variant,
        platform=str(plan.platform),
        image=plan.hash_ref,
        image_id=image_id,
        size_bytes=size,
        seconds=0.0,
        log_path=None,
        cached=True,
    )


def published(plan: BuildPlan, prefix: str, registry: Registry) -> BuildResult | None:
    """The result of an earlier build with the same content hash that was pushed under ``prefix``
    (``HOST[:PORT][/NAMESPACE]``; its content-hash tag is there, as ``registry`` reports), else None. ``image`` is the
    registry ref, ``image_id`` the manifest digest, ``size_bytes`` 0 (unknown until pulled). Raises RegistryError: the
    registry did not answer."""
    ref = remote_ref(prefix, plan.hash_ref)
    digest = registry.digest(ref)
    if digest is None:
        return None
    return BuildResult(
        variant=plan.variant,
        platform=str(plan.platform),
        image=ref,
        image_id=digest,
        size_bytes=0,
        seconds=0.0,
        log_path=None,
        cached=True,
    )


def execute(client: docker.DockerClient, plan: BuildPlan, *, work_dir: Path, log_dir: Path) -> BuildResult:
    """Run ``plan`` with ``docker buildx build``, its output streamed to stderr and saved under ``log_dir``.

    Raises BuildError: BuildKit exited non-zero (the message names the log file and its last lines; a full disk of the
    engine names its data root); EngineUnreachableError: the engine went away during the build (``failure``);
    KeyboardInterrupt (``Terminated`` included): after ending ``docker buildx build``; no tag was set."""
    arch = plan.arch
    context_dir = work_dir / f"{plan.variant}-{arch}"
    outputs.make_dirs(log_dir)
    log_path = log_dir / f"{plan.variant}-{arch}.build.log"
    iidfile = work_dir / f"{plan.variant}-{arch}.iid"
    stage_context(plan, context_dir)
    argv = untagged(buildx_argv(build_spec(plan, context_dir=context_dir), iidfile=iidfile))
    started = time.monotonic()
    tail: list[str] = []
    prefix = f"[{plan.variant}] "
    try:
        with outputs.guarded(log_path):
            log = log_path.open("w", encoding="utf-8", buffering=1)  # line-buffered: tail -f shows it live
        with log:

            def on_line(line: str) -> None:
                nonlocal tail
                with outputs.guarded(log_path):
                    log.write(line)
                sys.stderr.write(prefix + shown(line, lines=True))  # a package's build prints anything
                tail = [*tail, line.rstrip()][-20:]

            # Ctrl-C or SIGTERM: the build's client ends, and BuildKit cancels the build (no tag was set).
            returncode = process.stream(argv, on_line=on_line)
    finally:
        shutil.rmtree(context_dir, ignore_errors=True)
    seconds = time.monotonic() - started
    if returncode != 0:
        data_root = _data_root(client) if engine.no_space_line(tail) else None  # asked only when it is named
        raise failure(plan, tail, seconds=seconds, log_path=log_path, data_root=data_root)
    tag_built(client, iidfile.read_text(encoding="utf-8").strip(), plan.refs)
    image_id, size = _image_size(client, plan.hash_ref)
    return BuildResult(
        variant=plan.variant,
        platform=str(plan.platform),
        image=plan.hash_ref,
        image_id=image_id,
        size_bytes=size,
        seconds=seconds,
        log_path=log_path,
        cached=False,
    )


@dataclass(frozen=True, kw_only=True)
class BuildPolicy:
    """When and where to build: ``registry`` and ``cache_registry`` are ``HOST[:PORT][/NAMESPACE]``."""

    out_dir: Path
    force: bool = False
    registry: str | None = None
    cache_registry: str | None = None
    cache_read_only: bool = False


def execute_plans(client: docker.DockerClient, plans: Sequence[BuildPlan], policy: BuildPolicy) -> list[BuildResult]:
    """Raises BuildError, RegistryError (the registry did not answer)."""
    results = []
    settings = None
    if policy.cache_registry is not None:
        settings = cache.CacheSettings(
            registry=policy.cache_registry, write=not policy.cache_read_only, driver=cache.builder_driver()
        )
    for the_plan in plans:
        if settings is not None:
            the_plan = cache.apply(the_plan, settings)
        done = None if policy.force else existing(client, the_plan)
        if done is not None:
            note(f"{the_plan.variant}: {done.image} exists (content hash unchanged); --force rebuilds")
        elif not policy.force and policy.registry:
            done = published(the_plan, policy.registry, EngineRegistry(client))
            if done is not None:
                note(
                    f"{the_plan.variant}: {done.image} exists in the registry (content hash unchanged); "
                    "--force rebuilds"
                )
        if done is None:
            done = execute(client, the_plan, work_dir=policy.out_dir / "context", log_dir=policy.out_dir / "logs")
            if settings is not None:
                cache.export_inline(the_plan, settings)
        results.append(done)
    return results
