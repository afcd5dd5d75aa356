"""``tools/matrix kube``: the Kubernetes manifests that run a variant's image under each deployment profile."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click
import docker
import docker.errors

from matrixtool.commands import _params
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.core import engine, outputs
from matrixtool.core.errors import ConfigError, MatrixError
from matrixtool.deploy import kube, kube_checks, kube_job, kube_times
from matrixtool.model import reference
from matrixtool.model.checks import DEFAULT_SUITE
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Variant
from matrixtool.model.profiles import ProfileChoice
from matrixtool.model.select import select_variants
from matrixtool.smoke.serve import line as serve_line
from matrixtool.smoke.serve import start as serve_start


class InvalidManifest(MatrixError):
    """A manifest this tool wrote breaks the Kubernetes schemas or PSS restricted: a bug of this tool (exit 1)."""


@dataclass(frozen=True, kw_only=True)
class Args:
    """``profiles`` empty: every profile of each variant; ``image`` None: ``vllm-matrix/<variant>:<version tag>``
    (``reference.version_tag``); ``report``: its ``serve`` results give the measured time to ready per profile (cold:
    the startupProbe's; warm: an annotation); ``cache_claim``: the compile cache's PersistentVolumeClaim (None: an
    emptyDir); ``smoke_job``:
    write the Job that runs the variant's bundle in a pod of the profile instead; ``cluster``: where they are applied
    (OpenShift: the restricted-v2 SCC assigns UID and fsGroup, ``kube.Cluster``); ``read_start``: how an image's
    users must start its server and how that was known (``ImageStarts``; None: this project's form, assumed)."""

    variants: tuple[Variant, ...]
    profiles: tuple[str, ...] = ()
    image: str | None = None
    report: Path | None = None
    out: Path
    model: str = serve_line.MODEL_PATH
    model_claim: str = "vllm-models"
    cache_claim: str | None = None
    smoke_job: bool = False
    suite: str = DEFAULT_SUITE
    cluster: kube.Cluster = kube.Cluster.KUBERNETES
    read_start: Callable[[str], tuple[serve_start.Start, str]] | None = None

    def __post_init__(self) -> None:
        reference.check_flags(image=self.image)
        problems = kube.flag_problems(model=self.model, claim=self.model_claim, cache_claim=self.cache_claim)
        if problems:
            raise ConfigError("flags", problems)


@dataclass(frozen=True, kw_only=True)
class Written:
    """One manifest file: its variant, profile, path, the cold start its probes allow for and where it came from,
    the form its server starts in (``start``) and how that was known (``start_source``);
    ``scc``: for OpenShift, why restricted-v2 would refuse it (empty: admitted), None for plain Kubernetes."""

    variant: str
    profile: str
    path: Path
    cold_start_s: float
    cold_start_source: str
    pss_restricted: bool
    scc: tuple[str, ...] | None = None
    start: str = serve_line.PROJECT_START.form
    start_source: str = ""


def run(args: Args) -> list[Written]:
    """The manifests of ``args``, the server started as the image's users must (``args.read_start``).
    Profiles named ``restricted`` are also validated against PSS restricted; for OpenShift every profile is
    judged against the restricted-v2 SCC (a refusal is reported, not raised: another SCC may be granted).

    Raises ConfigError: an unknown profile, an unreadable report or one whose serve figures are no time to ready
    (exit 3), or an image that no form can serve (``kube.start_in_pod``); OutputError: a target is no regular file
    (a folder, a FIFO) or a write failed (exit 3; no manifest was replaced); InvalidManifest: a written manifest is
    invalid (a bug of this tool)."""
    ready, warm = kube_times.report_times(args.report)
    written, texts = [], []
    for variant in args.variants:
        image = args.image or f"vllm-matrix/{variant.name}:{reference.version_tag(variant.vllm.version)}"
        start, start_source = (
            args.read_start(image) if args.read_start is not None else (serve_line.PROJECT_START, kube.START_ASSUMED)
        )
        start = kube.start_in_pod(start, image)
        for profile in ProfileChoice(names=args.profiles).resolve(variant.name, variant.profiles):
            key = (variant.name, profile.name)
            serving = kube.serving_for(
                variant,
                profile.name,
                ready.get(key),
                model=args.model,
                claim=args.model_claim,
                cache_claim=args.cache_claim,
                warm_s=warm.get(key),
                start=(start, start_source),
            )
            docs = kube.manifests(
                variant=variant.name,
                accelerator=variant.accelerator.value,
                profile=profile.name,
                values=profile.values,
                image=image,
                serving=serving,
                cluster=args.cluster,
            )
            name = f"{variant.name}.{profile.name}.yaml"
            if args.smoke_job:
                data, deadline = kube_job.bundle_for(variant, args.suite)
                docs = kube_job.smoke_job(
                    docs, variant=variant.name, profile=profile.name, image=image, bundle_data=data, deadline_s=deadline
                )
                name = f"{variant.name}.{profile.name}.smoke-job.yaml"
            problems = kube_checks.validate(docs)
            strict = profile.name == "restricted"
            if strict:
                problems += kube_checks.pss_restricted_problems(docs)
            if problems:
                raise InvalidManifest(f"{variant.name}/{profile.name}: " + "; ".join(problems))
            scc = None
            if args.cluster is kube.Cluster.OPENSHIFT:
                scc = tuple(kube_checks.scc_restricted_v2_problems(docs))
            path = args.out / name
            texts.append((path, kube_checks.to_yaml(docs)))
            written.append(
                Written(
                    variant=variant.name,
                    profile=profile.name,
                    path=path,
                    cold_start_s=serving.cold_start_s,
                    cold_start_source=serving.cold_start_source,
                    pss_restricted=strict,
                    scc=scc,
                    start=serving.start,
                    start_source=serving.start_source,
                )
            )
    # Written only once every manifest is made and valid (a bad profile or manifest leaves no folder or file), as one
    # set: a target that is a folder or a FIFO refuses the whole set before any file is replaced.
    outputs.write_set(dict(texts))
    return written


class ImageStarts:
    """``read_start`` of ``Args`` on this machine's engine: an image's config and files read as the serve check
    reads them (``serve_start.choose``), once per image; where the engine or the image is not there, this project's
    form, said to be assumed and why. The client is made at the first image and kept."""

    def __init__(self) -> None:
        self.client: docker.DockerClient | None = None
        self.seen: dict[str, tuple[serve_start.Start, str]] = {}

    def __call__(self, image: str) -> tuple[serve_start.Start, str]:
        if image not in self.seen:
            self.seen[image] = self._read(image)
        return self.seen[image]

    def _read(self, image: str) -> tuple[serve_start.Start, str]:
        try:
            self.client = self.client or engine.connect()
            config = serve_start.ImageConfig.of(self.client.images.get(image).attrs)
            with serve_start.ImageFiles(self.client, image, session=uuid.uuid4().hex[:12]) as files:
                start = serve_start.choose(config, files)
        except (MatrixError, docker.errors.DockerException) as exc:
            why = "not on this machine's engine" if isinstance(exc, docker.errors.ImageNotFound) else str(exc)[:200]
            return serve_line.PROJECT_START, f"{kube.START_ASSUMED} ({image}: {why})"
        entry = serve_start.shown(config.entrypoint) if config.entrypoint else "none"
        return start, f"read from the image: ENTRYPOINT {entry}, CMD {serve_start.shown(config.cmd)}; {start.how}"


@click.command("kube")
@click.argument("variants", nargs=-1)
@click.option("--profile", "profiles", multiple=True, help="Deployment profile (repeatable; default: every profile).")
@click.option(
    "--image",
    type=_params.IMAGE,
    default=None,
    help="Image the Deployment runs (default: vllm-matrix/<variant>:<version tag>, docs/publishing.md).",
)
@click.option(
    "--from-report",
    "report",
    type=_params.INPUT_FILE,
    default=None,
    help="A run/test --json-file report: its serve results give the measured time to ready for the probes.",
)
@click.option("--model", default=serve_line.MODEL_PATH, show_default=True, help="The model path the server serves.")
@click.option("--model-claim", default="vllm-models", show_default=True, help="PersistentVolumeClaim holding it.")
@click.option(
    "--cache-claim",
    default=None,
    help="PersistentVolumeClaim for vLLM's compile cache, mounted at the image's cache root (default: an emptyDir, "
    "kept across the container's restarts, not the pod's).",
)
@click.option(
    "--smoke-job",
    is_flag=True,
    help="Write instead the Job that runs the variant's smoke bundle in a pod of each profile (JSON in its log).",
)
@click.option(
    "--suite",
    default=DEFAULT_SUITE.value,
    show_default=True,
    help="With --smoke-job: the suite of checks the bundle runs (quick, full).",
)
@click.option(
    "--cluster",
    type=click.Choice([c.value for c in kube.Cluster]),
    default=kube.Cluster.KUBERNETES.value,
    show_default=True,
    help="Where the manifests go: openshift leaves the UID, GID and fsGroup to the restricted-v2 SCC (the "
    "namespace's ranges); kubernetes writes the profile's.",
)
@pass_settings
def command(
    settings: Settings,
    /,
    variants: Sequence[str],
    profiles: Sequence[str],
    image: str | None,
    report: Path | None,
    model: str,
    model_claim: str,
    cache_claim: str | None,
    smoke_job: bool,
    suite: str,
    cluster: str,
) -> None:
    """Write the Kubernetes manifests (Deployment, Service, NetworkPolicy) that run each variant's image under
    each deployment profile's conditions, to <out>/kube/; validated offline against the Kubernetes schemas
    (kubernetes-validate), for restricted the Pod Security Standard "restricted", and with --cluster openshift
    OpenShift's restricted-v2 SCC."""
    selected = select_variants(load_matrix(settings.matrix_path), variants)
    written = run(
        Args(
            variants=tuple(selected),
            profiles=tuple(profiles),
            image=image,
            report=report,
            out=settings.out_dir / "kube",
            model=model,
            model_claim=model_claim,
            cache_claim=cache_claim,
            smoke_job=smoke_job,
            suite=suite,
            cluster=kube.Cluster(cluster),
            read_start=ImageStarts(),
        )
    )
    for w in written:
        pss = "; PSS restricted: ok" if w.pss_restricted else ""
        if w.scc is not None:
            pss += "; OpenShift restricted-v2 SCC: " + (
                "ok" if not w.scc else f"refused ({'; '.join(w.scc)}): grant the service account an SCC that allows it"
            )
        if smoke_job:
            click.echo(
                f"{w.path}: Kubernetes {kube_checks.K8S_VERSION} schemas: valid{pss}; "
                "the Job's log ends with the JSON report"
            )
            continue
        click.echo(
            f"{w.path}: Kubernetes {kube_checks.K8S_VERSION} schemas: valid{pss}; startupProbe allows "
            f"{kube.startup_window_s(w.cold_start_s):.0f} s ({kube.STARTUP_MARGIN:g}x {w.cold_start_s:.1f} s, "
            f"at least {kube.MIN_STARTUP_S} s; {w.cold_start_source}); the server starts in the {w.start} form "
            f"({w.start_source})"
        )
