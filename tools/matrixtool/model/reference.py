"""Image references (``--image``, ``--registry``, ``--repository``, ``base_image``) checked by the OCI
distribution reference grammar before the engine sees them.

The grammar is github.com/distribution/reference (regexp.go), through its Python port ``docker-image-py``
(``docker_image.reference``). That port anchors with ``$``, which also matches before a final newline,
so every value is first refused here when it holds whitespace or a control character, then matched whole.
"""

from __future__ import annotations

import hashlib

import regex
from docker_image import reference as oci
from docker_image.regexp import DOMAIN_AND_PORT, REMOTE_NAME
from packaging.version import InvalidVersion, Version

from matrixtool.core.errors import ConfigError

# distribution/reference: NameTotalLengthMax; a tag is at most 128 characters by its own pattern.
MAX_LENGTH = 255 + 1 + 128 + 1 + 71 + 64
# distribution/reference: NameTotalLengthMax, the whole name (registry host and path) of an image.
MAX_NAME_LENGTH = 255
_NAME = regex.compile(REMOTE_NAME, regex.ASCII)
_DOMAIN = regex.compile(DOMAIN_AND_PORT, regex.ASCII)
# distribution/reference: the tag grammar.
_TAG = regex.compile(r"[\w][\w.-]{0,127}", regex.ASCII)


def _printable_problem(value: str) -> str | None:
    if not value:
        return "is empty"
    if len(value) > MAX_LENGTH:
        return f"is {len(value)} characters long (at most {MAX_LENGTH})"
    bad = next((c for c in value if c.isspace() or not c.isprintable()), None)
    if bad is not None:
        return f"holds {bad!r} (no whitespace or control characters in a reference)"
    return None


def _host_problem(host: str) -> str | None:
    """Why ``host`` is not a registry ``HOST[:PORT]`` (the grammar allows any digits as a port)."""
    if not _DOMAIN.fullmatch(host):
        return f"starts with {host!r}, which is not a registry HOST[:PORT]"
    _, colon, port = host.rpartition(":")
    if colon and port.isdigit() and not 1 <= int(port) <= 65535:
        return f"has port {port}, outside 1-65535"
    return None


def _name_length_problem(value: str) -> str | None:
    if len(value) > MAX_NAME_LENGTH - len("/cuda-arm64"):
        return (
            f"is {len(value)} characters long; with '/<variant>' an image name must stay within "
            f"{MAX_NAME_LENGTH} characters"
        )
    return None


def image_problem(value: str) -> str | None:
    """Why ``value`` is not an image reference ``[HOST[:PORT]/]NAME[:TAG][@DIGEST]`` (None: it is one).

    Docker's familiar names (``debian:bookworm-slim``) are accepted, as ``docker pull`` accepts them.
    """
    problem = _printable_problem(value)
    if problem is not None:
        return problem
    try:
        oci.Reference.parse_normalized_named(value)
    except oci.InvalidReference as exc:
        return f"is not an image reference ({exc}); write [HOST[:PORT]/]name[:tag][@sha256:<64 hex>], lowercase name"
    host, slash, _ = value.partition("/")
    if slash and ("." in host or ":" in host or host == "localhost"):
        return _host_problem(host)  # the grammar takes any digits as a port: the same rule as --registry's
    return None


def repository_problem(value: str) -> str | None:
    """Why ``value`` cannot prefix a repository ``<value>/<variant>`` (None: it can).

    A repository is path components of ``[a-z0-9]`` joined by ``.``, ``_``, ``__`` or ``-``, separated by
    ``/``, optionally after a registry ``HOST[:PORT]/``; no tag, no digest.
    """
    problem = _printable_problem(value)
    if problem is not None:
        return problem
    problem = _name_length_problem(value)
    if problem is not None:
        return problem
    host, slash, rest = value.partition("/")
    if slash and ("." in host or ":" in host or host == "localhost"):
        problem = _host_problem(host)
        if problem is not None:
            return problem
        value = rest
    if not _NAME.fullmatch(value):
        return (
            "is not a repository name (lowercase letters and digits, single separators '.', '_', '__' or '-', "
            "components joined by '/', no tag or digest, no leading or trailing '/')"
        )
    return None


def registry_problem(value: str) -> str | None:
    """Why ``value`` is not a registry prefix ``HOST[:PORT][/NAMESPACE]`` (None: it is one).

    The host must read as a registry the way the Docker CLI reads one (it holds a ``.`` or ``:`` or is
    ``localhost``); otherwise ``docker push`` would send the image to Docker Hub under that name.
    """
    problem = _printable_problem(value)
    if problem is not None:
        return problem
    if "://" in value:
        return "has a scheme; give HOST[:PORT][/NAMESPACE] only"
    problem = _name_length_problem(value)
    if problem is not None:
        return problem
    host, _, namespace = value.partition("/")
    problem = _host_problem(host)
    if problem is not None:
        return problem
    if not ("." in host or ":" in host or host == "localhost"):
        return (
            f"host {host!r} holds no '.' or ':' and is not 'localhost': Docker would read it as a Docker Hub "
            "namespace; give the registry host (registry.example.com, 127.0.0.1:5000)"
        )
    if namespace and not _NAME.fullmatch(namespace):
        return f"namespace {namespace!r} is not a repository path (lowercase, single separators, no trailing '/')"
    return None


def check_flags(*, image: str | None = None, registry: str | None = None, repository: str | None = None) -> None:
    """Raises ConfigError: naming each bad flag, its value and the form it must have (exit 3)."""
    problems = []
    for flag, value, check in (
        ("--image", image, image_problem),
        ("--registry", registry, registry_problem),
        ("--repository", repository, repository_problem),
    ):
        if value is not None:
            problem = check(value)
            if problem is not None:
                problems.append(f"{flag} {value!r} {problem}")
    if problems:
        raise ConfigError("flags", problems)


def version_tag(version: str, *, key: str = "vllm.version") -> str:
    """The image tag of a variant's ``version`` (matrix.yaml ``vllm.version``): the version in PEP 440's normal form
    with its local label's ``+`` written ``-`` and an epoch's ``!`` written ``_`` (``0.33.0+rocm721`` ->
    ``0.33.0-rocm721``, ``0.32.0`` -> ``0.32.0``). A tag cannot hold ``+`` or ``!``; a normal-form version holds
    neither ``-`` nor ``_``, so two versions never share a tag. The one rule for every tag of a version: ``build``,
    ``bake``, ``push``, ``manifest``, ``kube`` (the label ``org.opencontainers.image.version`` keeps the version).

    Raises ConfigError: ``version`` is no PEP 440 version, or its tag is longer than a tag may be (128 characters),
    naming ``key`` (exit 3)."""
    try:
        normal = str(Version(version))
    except InvalidVersion as exc:
        raise ConfigError("matrix.yaml", [f"{key}: {version[:80]!r} is not a PEP 440 version"]) from exc
    tag = normal.replace("+", "-").replace("!", "_")
    if not _TAG.fullmatch(tag):
        raise ConfigError(
            "matrix.yaml",
            [f"{key}: the image tag of {version[:80]!r}… is {len(tag)} characters long; a tag holds at most 128"],
        )
    return tag


def suffixed_tag(ref: str, suffix: str) -> str:
    """``ref`` with ``-<suffix>`` after its tag (``latest`` where it has none): ``debian:bookworm-slim`` ->
    ``debian:bookworm-slim-arm64``. A digest's first 12 hex go into the tag (one local tag per digest); a tag that would
    be over 128 characters keeps its start and a hash of the rest, so distinct refs keep distinct tags. ``ref`` is a
    reference (``image_problem`` is None); the result is one too."""
    parsed = oci.Reference.parse(ref)
    tag = str(parsed["tag"] or "latest")
    if parsed["digest"]:
        tag = f"{tag}-{str(parsed['digest']).partition(':')[2][:12]}"
    tail = f"-{suffix}"
    if len(tag) + len(tail) > 128:
        tag = f"{tag[: 128 - len(tail) - 9]}-{hashlib.sha256(tag.encode()).hexdigest()[:8]}"
    return f"{parsed['name']}:{tag}{tail}"
