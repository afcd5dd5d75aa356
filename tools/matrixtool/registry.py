"""Container registries: image refs, manifest digests over the Distribution HTTP API, re-homed refs.

The pure half (``parse_ref``, ``manifest_url``, ``remote_ref``) turns refs into values and URLs; the
thin executor ``manifest_digest`` asks a registry one ``HEAD /v2/<name>/manifests/<tag>`` question.
The API is the OCI Distribution spec (https://github.com/opencontainers/distribution-spec, "Checking
if content exists in the registry"); anonymous bearer tokens follow Docker's token spec
(https://distribution.github.io/distribution/spec/auth/token/). Registries that need a login are
answered with a ``RegistryError`` that says so (``docker login`` credentials are not read here).
"""

from __future__ import annotations

import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from matrixtool.errors import RegistryError

# Docker's normalisation: a ref without a registry host means Docker Hub, whose API host is this one.
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
# Loopback registries are spoken to over plain HTTP, as dockerd and BuildKit do (no TLS needed).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
# Every manifest media type a tag can point to; the registry answers the digest of what it stores.
MANIFEST_ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
TIMEOUT_S = 15.0
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True, kw_only=True)
class ImageRef:
    """A parsed image ref: ``registry`` host[:port] as written (``docker.io`` when none), ``repository``
    (``library/`` added for Docker Hub's official images), ``tag`` (``latest`` when none) and ``digest``."""

    registry: str
    repository: str
    tag: str
    digest: str | None = None

    @property
    def api_host(self) -> str:
        """The host the HTTP API answers on (Docker Hub's API is not on ``docker.io``)."""
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def scheme(self) -> str:
        """``http`` for loopback registries, else ``https``."""
        bracketed = self.registry.startswith("[")  # an IPv6 literal, e.g. [::1]:5000
        host = self.registry.split("]", 1)[0] + "]" if bracketed else self.registry.split(":", 1)[0]
        return "http" if host in LOOPBACK_HOSTS else "https"


def parse_ref(ref: str) -> ImageRef:
    """Split ``ref`` the way Docker does: the first path part is a registry when it holds ``.`` or ``:``
    or is ``localhost``.

    Raises:
        RegistryError: ``ref`` is empty or its digest is not ``sha256:<64 hex>``.
    """
    if not ref or ref != ref.strip():
        raise RegistryError(f"{ref!r} is not an image ref", ref=ref)
    name, _, digest = ref.partition("@")
    if digest and not _DIGEST.match(digest):
        raise RegistryError(f"{ref}: digest {digest!r} is not sha256:<64 hex>", ref=ref)
    last = name.rsplit("/", 1)[-1]
    tag = "latest"
    if ":" in last:
        name, tag = name.rsplit(":", 1)
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, name
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    return ImageRef(registry=registry, repository=repository, tag=tag, digest=digest or None)


def manifest_url(ref: ImageRef) -> str:
    """``<scheme>://<api host>/v2/<repository>/manifests/<digest or tag>``."""
    return f"{ref.scheme}://{ref.api_host}/v2/{ref.repository}/manifests/{ref.digest or ref.tag}"


def remote_ref(registry: str, local_ref: str) -> str:
    """``local_ref`` (``vllm-matrix/cpu:0.32.0``) re-homed under ``registry`` (``HOST[:PORT][/NAMESPACE]``).

    Raises:
        RegistryError: ``registry`` is empty or has a scheme (``http://…``): give the host only.
    """
    prefix = registry.strip().rstrip("/")
    if not prefix or "://" in prefix:
        raise RegistryError(
            f"--registry {registry!r}: give HOST[:PORT][/NAMESPACE], without a scheme", registry=registry
        )
    return f"{prefix}/{local_ref}"


def bearer_challenge(header: str) -> dict[str, str] | None:
    """The parameters of a ``WWW-Authenticate: Bearer realm=…,service=…,scope=…`` header, or None."""
    scheme, _, params = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return dict(re.findall(r'(\w+)="([^"]*)"', params))


def _request(url: str, *, method: str, headers: dict[str, str]) -> urllib.request.Request:
    return urllib.request.Request(url, method=method, headers=headers)


def _anonymous_token(challenge: dict[str, str], ref: ImageRef) -> str:
    query = {
        "service": challenge.get("service", ""),
        "scope": challenge.get("scope", f"repository:{ref.repository}:pull"),
    }
    url = challenge["realm"] + "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(_request(url, method="GET", headers={}), timeout=TIMEOUT_S) as resp:
        body = json.load(resp)
    return str(body.get("token") or body.get("access_token") or "")


def manifest_digest(ref: str, *, timeout: float = TIMEOUT_S) -> str | None:
    """The ``sha256:…`` digest the registry of ``ref`` stores for its tag, or None when it has no such tag.

    One ``HEAD`` request (plus an anonymous token request when the registry asks for one), each at most
    ``timeout`` seconds; printed as ``+ HEAD <url>`` first.

    Raises:
        RegistryError: the registry is unreachable, needs credentials, or answered something else
            (the message names the registry host and the ref).
    """
    parsed = parse_ref(ref)
    url = manifest_url(parsed)
    print(f"+ HEAD {url}", file=sys.stderr, flush=True)
    headers = {"Accept": MANIFEST_ACCEPT}
    for attempt in range(2):
        try:
            request = _request(url, method="HEAD", headers=headers)
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                digest = resp.headers.get("Docker-Content-Digest", "")
                if not _DIGEST.match(digest):
                    raise RegistryError(
                        f"registry {parsed.api_host} answered {ref} without a Docker-Content-Digest header",
                        registry=parsed.api_host,
                        ref=ref,
                    )
                return str(digest)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            challenge = bearer_challenge(exc.headers.get("WWW-Authenticate", "")) if exc.code == 401 else None
            if challenge and "realm" in challenge and attempt == 0:
                try:
                    token = _anonymous_token(challenge, parsed)
                except (urllib.error.URLError, OSError, ValueError) as token_exc:
                    raise _unreachable(parsed, ref, token_exc) from token_exc
                headers["Authorization"] = f"Bearer {token}"
                continue
            raise RegistryError(
                f"registry {parsed.api_host} answered HTTP {exc.code} for {ref}"
                + ("; it needs credentials this tool does not send" if exc.code in (401, 403) else ""),
                registry=parsed.api_host,
                ref=ref,
            ) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise _unreachable(parsed, ref, exc) from exc
    raise RegistryError(
        f"registry {parsed.api_host} refused an anonymous token for {ref}", registry=parsed.api_host, ref=ref
    )


def _unreachable(parsed: ImageRef, ref: str, exc: BaseException) -> RegistryError:
    reason = getattr(exc, "reason", None) or exc
    return RegistryError(
        f"registry {parsed.api_host} is unreachable ({reason}) while looking up {ref}; "
        "check the network, a proxy, or the --registry address",
        registry=parsed.api_host,
        ref=ref,
    )
