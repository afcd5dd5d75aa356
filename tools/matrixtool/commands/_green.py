"""The last green image for ``run`` and ``test``: one JSON report per variant under ``<out>/reports/``, and for
a failed check the image that last passed and the head of the diff against it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
import docker

from matrixtool import report
from matrixtool.core import engine, outputs
from matrixtool.core.errors import MatrixError
from matrixtool.core.untrusted import shown
from matrixtool.supply import imagediff

# Differences printed under a failed check (``tools/matrix diff`` shows them all).
HEAD_LINES = 12


def report_paths(reports: Path, variant: str) -> tuple[Path, Path]:
    """(``<variant>.json``: the variant's latest report, ``<variant>.green.json``: its latest all-green one)."""
    return reports / f"{variant}.json", reports / f"{variant}.green.json"


def own_image_problem(ref: str, labels: Mapping[str, str] | None, variant: str) -> str | None:
    """Why the image ``ref`` with ``labels`` (its config's labels; None: unreadable) is not one of ``variant``'s
    own images, or None when it is: the rendered Dockerfile labels each image ``name=vllm-<variant>``, and the
    tool tags it ``<repository>/<variant>`` (``-<arch>`` for a variant of several platforms,
    ``plan.image_repository``), locally or in a registry. An image built FROM one keeps its labels, so the
    label alone does not tell; the ref must say so too."""
    want = f"vllm-{variant}"
    name = (labels or {}).get("name")
    if name != want:
        shown_name = f"'{shown(str(name))}'" if name is not None else "none"
        return f"its label name is {shown_name}, not '{want}'"
    platform = str((labels or {}).get("io.vllm-matrix.platform") or "")
    names = {variant, f"{variant}-{platform.rsplit('/', 1)[-1]}"} if platform else {variant}
    last = ref.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    if "/" not in ref.split("@", 1)[0] or last not in names:
        return f"its ref is no <repository>/{variant}:TAG the tool tags"
    return None


def repository_of(ref: str) -> str:
    """The repository part of an image ``ref`` before its variant's name (``127.0.0.1:5000/vllm-matrix`` of
    ``127.0.0.1:5000/vllm-matrix/cpu:0.32.0``, of ``…/cpu@sha256:…`` too): the matrix's ``--repository``."""
    return ref.split("@", 1)[0].rsplit("/", 1)[0] if "/" in ref.split("@", 1)[0] else ""


def engine_labels(connect: Callable[[], docker.DockerClient] = engine.connect) -> Callable[[str], Any]:
    """A function giving an image's labels (None where the engine cannot say), connecting on the first call."""
    client: list[docker.DockerClient] = []

    def labels(image: str) -> Mapping[str, str] | None:
        try:
            client[:] = client or [connect()]
            found = (client[0].images.get(image).attrs.get("Config") or {}).get("Labels")
        except Exception:  # an image the engine lost or an engine that went away: not known to be its own
            return None
        return found if isinstance(found, Mapping) else None

    return labels


def write_variant_reports(
    result: report.RunReport,
    reports: Path,
    *,
    labels: Callable[[str], Mapping[str, str] | None],
    notice: Callable[[str], None] = lambda line: None,
) -> list[Path]:
    """Each variant's checks as ``<variant>.json``, and as ``<variant>.green.json`` too when every one passed or was
    skipped and each image tested is the variant's own (``own_image_problem``); the green one is kept until the next
    green run, whatever red runs come between. Each variant's files are written as one set (``outputs.write_set``): a
    failed write leaves both as they were. Raises OutputError: a report cannot be
    written."""
    written = []
    for variant in dict.fromkeys(c.variant for c in result.checks):
        checks = [c for c in result.checks if c.variant == variant]
        text = report.to_json_text(report.RunReport(checks=checks))
        latest, green = report_paths(reports, variant)
        paths = [latest]
        if all(c.status.ok for c in checks):
            foreign = {
                c.image: why
                for c in checks
                if c.image and (why := own_image_problem(c.image, labels(c.image), variant))
            }
            if foreign:
                for image, why in foreign.items():
                    notice(f"{green.name} not updated: {shown(image)} is no image of {variant} ({why})")
            else:
                paths.append(green)
        written += outputs.write_set(dict.fromkeys(paths, text))
    return written


def failure_lines(
    result: report.RunReport,
    reports: Path,
    env: Mapping[str, str],
    *,
    connect: Callable[[], docker.DockerClient] = engine.connect,
) -> list[str]:
    """One block per variant with a failed check on an image, against the variant's own last green image (its green
    report, an image whose label and ref are still the variant's: ``own_image_problem``; where the failing image is
    the variant's own too, one of the same repository, the matrix that built it: ``repository_of``). The engine is
    asked only when a green image is on record. Raises MatrixError or docker's errors: the engine or an image could
    not be read (the caller reports it)."""
    out: list[str] = []
    failed: dict[str, Any] = {}
    for c in result.checks:
        if not c.status.ok:
            failed.setdefault(c.variant, c)
    client: docker.DockerClient | None = None
    labels = engine_labels(connect)
    for variant, check in failed.items():
        failing_own = own_image_problem(check.image, labels(check.image), variant) is None
        repository = repository_of(check.image) if failing_own else None

        def own(image: str, variant: str = variant, repository: str | None = repository) -> bool:
            if repository is not None and repository_of(image) != repository:
                return False  # another matrix's (--repository) image of a variant of the same name
            # An image the engine no longer has was judged its own when its green report was written.
            found = labels(image)
            return found is None or own_image_problem(image, found, variant) is None

        if imagediff.last_green(reports, variant, exclude_image=check.image, own=own) is None:
            out.append(f"{variant}: no earlier green image of {variant} in {reports}")
            continue
        client = client or connect()
        context = imagediff.failure_context(
            client, reports, variant, check.image, check.check, lines=HEAD_LINES, env=env, own=own
        )
        out.append(f"{variant} ({check.check} failed on {check.image}): {context}")
    return out


def report_last_green(result: report.RunReport, reports: Path, env: Mapping[str, str]) -> None:
    """``failure_lines`` then ``write_variant_reports`` (this run's red image is never its own
    green one), each on stderr; any exception of theirs becomes one ``warning:`` line."""
    try:
        for line in failure_lines(result, reports, env):
            click.echo(line, err=True)
    except Exception as exc:
        click.echo(f"warning: no diff against the last green image ({type(exc).__name__}: {exc})", err=True)
    try:
        write_variant_reports(
            result, reports, labels=engine_labels(), notice=lambda line: click.echo(f"note: {line}", err=True)
        )
    except (OSError, MatrixError) as exc:  # outputs' OutputError: a report cannot be written
        click.echo(f"warning: per-variant reports not written under {reports} ({exc})", err=True)
