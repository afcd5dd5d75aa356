"""The host's files a build reads, from the flags, else the environment: the CA bundle (``--ca-cert``,
``http.CA_ENV_VARS``) and the wheelhouse (``--wheelhouse``, ``PIP_FIND_LINKS``)."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path

from matrixtool.core import http
from matrixtool.core.errors import ConfigError

# Environment variable naming a folder of local wheels (pip's own name for it).
WHEELHOUSE_ENV_VAR = "PIP_FIND_LINKS"


def resolve_ca_cert(flag: Path | None, env: Mapping[str, str]) -> Path | None:
    """The CA bundle to pass as build secret, the one every HTTP request verifies against (``http.ca_bundle``:
    ``--ca-cert``, else the first of ``http.CA_ENV_VARS`` that is set)."""
    return http.ca_bundle(flag, env)


def existing_ca_cert(flag: Path | None, env: Mapping[str, str]) -> Path | None:
    """``resolve_ca_cert``, checked: the CA bundle that is read on the host (not only passed to a build). Raises
    ConfigError: the bundle named by ``--ca-cert`` or the variable is not a file, or holds no certificate OpenSSL reads
    (exit 3)."""
    ca_cert = resolve_ca_cert(flag, env)
    if ca_cert is not None and not ca_cert.is_file():
        source = "--ca-cert" if flag is not None else next(v for v in http.CA_ENV_VARS if env.get(v))
        raise ConfigError("flags", [f"{source} {str(ca_cert)!r} is not a file; give a PEM CA bundle or unset it"])
    if ca_cert is not None:
        try:  # OpenSSL's parser reads it now: a bundle of garbage is this flag's fault, not the index's (exit 10)
            ssl.create_default_context(cafile=str(ca_cert))
        except (ssl.SSLError, OSError) as exc:
            source = "--ca-cert" if flag is not None else next(v for v in http.CA_ENV_VARS if env.get(v))
            raise ConfigError(
                "flags",
                [f"{source} {str(ca_cert)!r} is not a usable CA bundle ({exc}); give a PEM CA bundle or unset it"],
            ) from exc
    return ca_cert


def resolve_wheelhouse(flag: Path | None, env: Mapping[str, str]) -> Path | None:
    """The wheelhouse folder: ``--wheelhouse``, else the first path in ``PIP_FIND_LINKS`` (space-separated)."""
    if flag is not None:
        return flag
    value = env.get(WHEELHOUSE_ENV_VAR, "").split()
    local = [v.removeprefix("file://") for v in value if not v.startswith(("http://", "https://"))]
    return Path(local[0]) if local else None
