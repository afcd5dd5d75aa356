"""Plan builds as values: the exact ``docker buildx build`` argv, tags, labels and the content hash.

Nothing here touches Docker or the network; ``build.py`` executes a ``BuildPlan``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from matrixtool.build.base import BaseImage, BaseKey
from matrixtool.build.pin import Lock
from matrixtool.build.render import RenderedFile, render_variant
from matrixtool.core.errors import ConfigError, RegistryError
from matrixtool.model import reference
from matrixtool.model.model import Platform, Variant
from matrixtool.model.variantrules import SUITE_PYTHON

DEFAULT_REPOSITORY = "vllm-matrix"
TARGET = "runtime"


# The label of every image built from a plan: its content hash (``content_hash``), so a tag can be told from a
# build of the plan's inputs (``executor.existing``).
CONTENT_HASH_LABEL = "io.vllm-matrix.content-hash"


@dataclass(frozen=True, kw_only=True)
class BuildPlan:
    """Everything needed to build one variant for one platform.

    ``wheelhouse`` is bind-mounted by the Dockerfile, never copied into a layer; ``refs``: the content-hash tag
    first; ``base_digest``: pinned by ``tools/matrix pin`` in the lock file, None when the base is not pinned.
    """

    variant: str
    platform: Platform
    files: tuple[RenderedFile, ...]
    wheelhouse: Path | None
    ca_cert: Path | None
    base_image: str
    content_hash: str
    refs: tuple[str, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    base_digest: str | None = None
    base_local: str | None = None
    # The PYTHON_VERSION build arg: set only when the base is a stand-in whose suite ships another Python
    # than the variant's (matrix.yaml stand_in.python); None keeps the Dockerfile's default.
    python_version: str | None = None
    # BuildKit cache sources and targets (``--cache-from``/``--cache-to`` values; ``cache.apply`` sets them).
    # Not build inputs: they never enter the content hash.
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()

    @property
    def hash_ref(self) -> str:
        """The image reference whose tag is derived from the content hash (``<repository>:<hash[:16]>``)."""
        return self.refs[0]

    @property
    def base_ref(self) -> str:
        """The ``BASE_IMAGE`` build arg: ``ref@sha256:…`` when pinned, else the per-platform local tag of an
        unpinned base (``base_local``, see ``base.platform_tag``), else the plain ref of matrix.yaml."""
        if self.base_digest:
            return pinned_ref(self.base_image, self.base_digest)
        return self.base_local or self.base_image

    @property
    def arch(self) -> str:
        """The architecture part of ``platform`` (``linux/amd64`` -> ``amd64``)."""
        return self.platform.arch

    @property
    def build_args(self) -> dict[str, str]:
        """The build args passed to BuildKit (``docker buildx build --build-arg`` and bake's ``args``)."""
        args = {"BASE_IMAGE": self.base_ref}
        if self.python_version:
            args["PYTHON_VERSION"] = self.python_version
        return args


@dataclass(frozen=True, kw_only=True)
class BuildSpec:
    """One BuildKit build, described once: ``buildx_argv`` renders it as a ``docker buildx build`` command and
    ``bake.bake_target`` as a bake target, so the two cannot drift apart. ``dockerfile`` is relative to
    ``context``.
    """

    context: Path
    dockerfile: str
    platform: str
    target: str
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    args: Mapping[str, str]
    secrets: tuple[str, ...] = ()
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()


# Both renderers load the result into the engine ("--load") and export the cache inline (the one exporter
# every driver has: the cache travels inside the image, so a pushed image is a cache source for the next build).
@dataclass(frozen=True, kw_only=True)
class BuildResult:
    """A finished build: ``image`` (the content-hash ref), ``image_id``, ``size_bytes`` (uncompressed,
    as the engine reports), ``seconds`` (wall time; 0 when skipped), ``cached`` (the hash tag existed)."""

    variant: str
    platform: str
    image: str
    image_id: str
    size_bytes: int
    seconds: float
    log_path: Path | None
    cached: bool


OUTPUTS = ("type=docker",)
CACHE_TO = ("type=inline",)


def build_spec(plan: BuildPlan, *, context_dir: Path, registry: str | None = None) -> BuildSpec:
    """The build of ``plan`` from the context staged at ``context_dir``.

    With ``registry`` (``HOST[:PORT][/NAMESPACE]``) the plan's refs are added re-homed under it too and its published
    images (content-hash tag, then version) are the cache source. Raises RegistryError: ``registry`` is not
    ``HOST[:PORT][/NAMESPACE]``."""
    remote = tuple(remote_ref(registry, ref) for ref in plan.refs) if registry else ()
    return BuildSpec(
        context=context_dir,
        dockerfile="Dockerfile",
        platform=str(plan.platform),
        target=TARGET,
        tags=(*plan.refs, *remote),
        labels=dict(sorted(plan.labels.items())),
        args=dict(sorted(plan.build_args.items())),
        secrets=(f"id=ca,src={plan.ca_cert}",) if plan.ca_cert is not None else (),
        # The plan's own cache (cache.apply: --cache-registry) first, then the published images under --registry.
        cache_from=(*plan.cache_from, *(f"type=registry,ref={ref}" for ref in remote)),
        cache_to=plan.cache_to or CACHE_TO,
        outputs=OUTPUTS,
    )


def buildx_argv(spec: BuildSpec, *, iidfile: Path) -> list[str]:
    """``spec`` as a ``docker buildx build`` command that writes the image ID to ``iidfile``."""
    argv = [
        "docker", "buildx", "build",
        "--progress=plain",
        "--platform", spec.platform,
        "--target", spec.target,
        "--file", str(spec.context / spec.dockerfile),
        "--iidfile", str(iidfile),
    ]  # fmt: skip
    for output in spec.outputs:
        argv += ["--output", output]
    for key, value in spec.args.items():
        argv += ["--build-arg", f"{key}={value}"]
    for secret in spec.secrets:
        argv += ["--secret", secret]
    for key, value in spec.labels.items():
        argv += ["--label", f"{key}={value}"]
    for tag in spec.tags:
        argv += ["--tag", tag]
    for cache in spec.cache_from:
        argv += ["--cache-from", cache]
    for cache in spec.cache_to:
        argv += ["--cache-to", cache]
    argv.append(str(spec.context))
    return argv


def remote_ref(registry: str, local_ref: str) -> str:
    """``local_ref`` (``vllm-matrix/cpu:0.32.0``) re-homed under ``registry`` (``HOST[:PORT][/NAMESPACE]``). Raises
    RegistryError: ``registry`` is empty or has a scheme (``http://…``): give the host only."""
    prefix = registry.strip().rstrip("/")
    if not prefix or "://" in prefix:
        raise RegistryError(
            f"--registry {registry!r}: give HOST[:PORT][/NAMESPACE], without a scheme", registry=registry
        )
    return f"{prefix}/{local_ref}"


def pinned_ref(ref: str, digest: str | None) -> str:
    """``ref@digest`` (the tag stays for readers; the digest decides what is pulled), or ``ref`` unpinned."""
    return f"{ref}@{digest}" if digest else ref


def wheelhouse_fingerprint(wheelhouse: Path) -> list[str]:
    """``name size mtime_ns`` per regular file in ``wheelhouse`` (sorted): cheap, changes when a wheel does."""
    rows = []
    for path in sorted(wheelhouse.iterdir()):
        if path.is_file():
            st = path.stat()
            rows.append(f"{path.name} {st.st_size} {st.st_mtime_ns}")
    return rows


def content_hash(
    *,
    files: tuple[RenderedFile, ...],
    platform: Platform,
    base_image_id: str | None,
    wheelhouse_rows: list[str],
    base_digest: str | None = None,
    base_image: str = "",
) -> str:
    """sha256 hex over every build input: rendered files, platform, base image ID, wheelhouse listing,
    and the pinned base digest from the lock file (when there is one).

    ``base_image_id`` None: the base was not looked up (``bake`` without an engine); the ref as named,
    ``base_image``, stands in for its ID, so the hash differs from a build's on an engine that has the base.

    The CA bundle is deliberately left out: it changes how packages are fetched, not what the image holds.
    An unpinned base adds no digest line, so hashes of unpinned builds stay as they were before pinning
    existed (their images are still found by ``build``'s skip).
    """
    digest = hashlib.sha256()
    for f in sorted(files, key=lambda f: str(f.path)):
        digest.update(f"file {f.path}\n".encode())
        digest.update(f.text.encode())
    base = base_image_id if base_image_id is not None else f"unchecked {base_image}"
    digest.update(f"platform {platform}\nbase {base}\n".encode())
    for row in wheelhouse_rows:
        digest.update(f"wheel {row}\n".encode())
    if base_digest:
        digest.update(f"base-digest {base_digest}\n".encode())
    return digest.hexdigest()


def image_repository(repository: str, variant: Variant, platform: Platform) -> str:
    """``<repository>/<variant>``, with the arch appended when the variant builds several platforms."""
    name = f"{repository}/{variant.name}"
    if len(variant.platforms) > 1:
        name += "-" + platform.arch
    return name


@dataclass(frozen=True, kw_only=True)
class BaseFacts:
    """A variant's base image on one platform: ``image_id`` None: not looked up (see ``content_hash``);
    ``digest`` None: unpinned; ``stand_in_suite``: the Debian suite of a stand-in (``stand_in_python``)."""

    image_id: str | None = None
    digest: str | None = None
    local_tag: str | None = None
    stand_in_suite: str | None = None

    @classmethod
    def of(cls, got: BaseImage | None, *, digest: str | None) -> BaseFacts:
        """The facts of ``got`` (None: the base was not looked up) and the pinned ``digest``."""
        if got is None:
            return cls(digest=digest)
        return cls(image_id=got.image_id, digest=digest, local_tag=got.local_tag, stand_in_suite=got.stand_in_suite)


@dataclass(frozen=True, kw_only=True)
class BuildInputs:
    """The inputs of a build besides the rendered files and the base; ``wheelhouse_rows`` are part of the
    content hash, ``revision`` and ``source_url`` go into labels."""

    wheelhouse: Path | None = None
    wheelhouse_rows: tuple[str, ...] = ()
    ca_cert: Path | None = None
    revision: str = "unknown"
    source_url: str = ""
    repository: str = DEFAULT_REPOSITORY


def plan_build(
    variant: Variant, *, platform: Platform, files: tuple[RenderedFile, ...], base: BaseFacts, inputs: BuildInputs
) -> BuildPlan:
    """The build of ``variant`` for ``platform`` from ``files`` (its rendered ``images/<variant>/``)."""
    base_digest = base.digest
    digest = content_hash(
        files=files,
        platform=platform,
        base_image_id=base.image_id,
        wheelhouse_rows=list(inputs.wheelhouse_rows),
        base_digest=base_digest,
        base_image=variant.base_image,
    )
    name = image_repository(inputs.repository, variant, platform)
    refs = (f"{name}:{digest[:16]}", f"{name}:{reference.version_tag(variant.vllm.version)}")
    labels = {
        "org.opencontainers.image.source": inputs.source_url,
        "org.opencontainers.image.revision": inputs.revision,
        "org.opencontainers.image.version": variant.vllm.version,
        "org.opencontainers.image.base.name": variant.base_image,
        **({"org.opencontainers.image.base.digest": base_digest} if base_digest else {}),
        CONTENT_HASH_LABEL: digest,
        "release": digest[:16],  # OpenShift's required `release` label: this build of `version`
        "io.vllm-matrix.platform": str(platform),
    }
    return BuildPlan(
        variant=variant.name,
        platform=platform,
        files=files,
        wheelhouse=inputs.wheelhouse if variant.index.wheelhouse else None,
        ca_cert=inputs.ca_cert,
        base_image=variant.base_image,
        content_hash=digest,
        refs=refs,
        labels=labels,
        base_digest=base_digest,
        base_local=base.local_tag,
        python_version=stand_in_python(variant, base.stand_in_suite),
    )


def stand_in_python(variant: Variant, suite: str | None) -> str | None:
    """The Python a stand-in of Debian ``suite`` ships when it is not ``variant.python``, else None. Raises ConfigError:
    the suite's Python differs and matrix.yaml does not accept it (stand_in.python unset), e.g. a stand-in from an older
    run whose suite no longer matches the variant."""
    if suite is None or SUITE_PYTHON.get(suite) in (None, variant.python):
        return None
    ships = SUITE_PYTHON[suite]
    if variant.stand_in_python != ships:
        raise ConfigError(
            f"variant {variant.name}",
            [
                f"variants.{variant.name}.stand_in: the local base {variant.base_image} is a Debian {suite} stand-in "
                f'with Python {ships}, the variant needs {variant.python}; add python: "{ships}" to stand_in '
                f"to accept that, or remove the stand-in image (docker rmi {variant.base_image})"
            ],
        )
    return ships


@dataclass(frozen=True, kw_only=True)
class PlanContext:
    """What every plan of one command shares (None: no CA bundle, no wheelhouse)."""

    templates_dir: Path
    lock: Lock
    ca_cert: Path | None
    wheelhouse: Path | None
    repository: str = DEFAULT_REPOSITORY
    revision: str = "unknown"
    source: str = ""


def plan_variants(
    variants: Sequence[Variant], bases: Mapping[BaseKey, BaseImage], context: PlanContext
) -> list[BuildPlan]:
    """Plan every (variant, platform), pure: a variant missing from ``bases`` has an unchecked base, named as in
    matrix.yaml, or ``ref@digest`` when pinned in ``context.lock``. Raises ConfigError: a stand-in base ships another
    Python than the variant accepts (``stand_in_python``)."""
    plans = []
    for variant in variants:
        files = tuple(render_variant(variant, context.templates_dir))
        digest = context.lock.digest(variant.base_image)
        wheels = context.wheelhouse if variant.index.wheelhouse else None
        inputs = BuildInputs(
            wheelhouse=wheels,
            wheelhouse_rows=tuple(wheelhouse_fingerprint(wheels)) if wheels else (),
            ca_cert=context.ca_cert,
            revision=context.revision,
            source_url=context.source,
            repository=context.repository,
        )
        for platform in variant.platforms:
            base = BaseFacts.of(bases.get((variant.name, platform)), digest=digest)
            plans.append(plan_build(variant, platform=platform, files=files, base=base, inputs=inputs))
    return plans
