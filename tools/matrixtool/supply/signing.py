"""Signatures and attestations of pushed images, with cosign 2.x and a key pair (no transparency log, no
network beyond the registry: it works against a loopback registry and air-gapped).

Predicate types: ``cyclonedx``, ``slsaprovenance1`` and ``SMOKE_PREDICATE``. A failed verification is
``UnverifiedError`` (exit 15). The key's password comes from ``COSIGN_PASSWORD`` (cosign's own variable; empty
for a key without one).
"""

from __future__ import annotations

import base64
import binascii
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker_image import reference as oci

from matrixtool.core import jsontext, process, untrusted
from matrixtool.core.errors import ConfigError, EngineUnreachableError, ExitCode, MatrixError, RegistryError
from matrixtool.model.yamlfile import read_config_text
from matrixtool.report import READ_BACK_SCHEMA

COSIGN_TIMEOUT_S = 180
PASSWORD_ENV = "COSIGN_PASSWORD"
SMOKE_PREDICATE = "https://vllm-image-matrix.invalid/attestations/smoke-report/v1"
SBOM_PREDICATE = "cyclonedx"  # cosign's name for https://cyclonedx.org/bom
PROVENANCE_PREDICATE = "slsaprovenance1"  # cosign's name for https://slsa.dev/provenance/v1
# cosign's flags for a key pair without Sigstore's public services (Rekor): nothing leaves for the internet.
NO_TLOG_SIGN = ("--tlog-upload=false", "--yes")
NO_TLOG_VERIFY = ("--insecure-ignore-tlog=true",)


class UnverifiedError(MatrixError):
    """An image is unsigned, signed by another key, or its tag names an image that is not the one signed."""

    exit_code = ExitCode.UNVERIFIED


@dataclass(frozen=True, kw_only=True)
class Attachment:
    """A predicate file attached to a digest as an attestation of ``predicate_type``."""

    predicate_type: str
    path: Path


@dataclass(frozen=True, kw_only=True)
class Signed:
    """What ``sign_and_attest`` did for one digest: ``ref`` (``name@sha256:…``) and the predicate types attached."""

    ref: str
    attestations: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Verified:
    """A verified image: ``ref`` as given, ``digest`` the manifest digest the signature covers."""

    ref: str
    digest: str


def by_digest(ref: str, digest: str) -> str:
    """``<name>@<digest>`` of a tagged ``ref`` (``127.0.0.1:5000/vllm-matrix/cpu:0.32.0``): what is signed. Raises
    ConfigError: ``ref`` is not an image reference."""
    try:
        parsed = oci.Reference.parse_normalized_named(ref)
    except oci.InvalidReference as exc:
        raise ConfigError("flags", [f"{ref!r} is not an image reference ({exc})"]) from exc
    name = ref.partition("@")[0]
    if parsed["tag"]:
        name = name[: -len(parsed["tag"]) - 1]
    return f"{name}@{digest}"


def find_cosign(env: Mapping[str, str]) -> str:
    """Raises EngineUnreachableError: none on ``env``'s PATH (``make engine`` installs Debian trixie's cosign)."""
    found = shutil.which("cosign", path=env.get("PATH"))
    if found is None:
        raise EngineUnreachableError("cosign is not installed; run 'make engine' (tools/setup-engine.sh installs it)")
    return found


MAX_KEY_BYTES = 64 * 1024
_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n([A-Za-z0-9+/=\r\n]+?)\r?\n?-----END \1-----\s*", re.ASCII)
PRIVATE_LABELS = ("ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY")
# The body of a cosign private key (sigstore's encrypted key format: scrypt, then nacl secretbox).
_PRIVATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["kdf", "cipher", "ciphertext"],
    "properties": {
        "kdf": {"type": "object", "required": ["name", "params", "salt"], "properties": {"name": {"type": "string"}}},
        "cipher": {"type": "object", "required": ["name", "nonce"], "properties": {"name": {"type": "string"}}},
        "ciphertext": {"type": "string", "minLength": 1},
    },
}


def _public_key_problem(pem: bytes) -> str | None:
    """Why ``pem`` holds no public key OpenSSL's parser reads (``openssl pkey -pubin``), or None; None too where
    no ``openssl`` is installed (the PEM armour and its base64 were checked, cosign reads the rest)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".pem") as scratch:
        scratch.write(pem)
        scratch.flush()
        done = process.run([openssl, "pkey", "-pubin", "-noout", "-in", scratch.name], timeout=30, quiet=True)
    if done.returncode in (process.NOT_FOUND, process.TIMED_OUT):
        return f"openssl could not read it ({done.stderr.strip().splitlines()[-1]})"
    return None if done.ok else "its PEM body is no public key (openssl pkey -pubin cannot read it)"


def _private_key_problem(body: bytes) -> str | None:
    """Why the PEM body ``body`` (base64-decoded) is no cosign encrypted private key (JSON: kdf, cipher,
    ciphertext), or None."""
    try:
        doc = jsontext.loads(body)
    except ValueError:
        return "its PEM body is not cosign's encrypted key (JSON with kdf, cipher and ciphertext)"
    problems = untrusted.shape_problems(doc, _PRIVATE_SCHEMA, limit=1)
    return f"its PEM body is not cosign's encrypted key ({problems[0]})" if problems else None


def check_key(path: Path, *, flag: str, private: bool, env: Mapping[str, str]) -> None:
    """Refuse a key flag before anything runs: not a readable regular file (at most ``MAX_KEY_BYTES``; a FIFO is never
    waited on), not one PEM block of the kind wanted with a base64 body, a public key OpenSSL cannot read
    (``_public_key_problem``), a private key that is not cosign's encrypted JSON, or (private) no password variable.
    Raises ConfigError: naming ``flag`` and what to do (exit 3)."""
    wanted = "PRIVATE KEY" if private else "PUBLIC KEY"
    make = "make a key pair with 'cosign generate-key-pair'"
    shown_path = repr(untrusted.shown(str(path)))
    try:
        text = read_config_text(path, limit=MAX_KEY_BYTES, what=f"a cosign {wanted.lower()} file ({make})")
    except ConfigError as exc:
        raise ConfigError("flags", [f"{flag} {shown_path}: {p}" for p in exc.problems]) from exc
    block = _PEM.search(text)
    labels = PRIVATE_LABELS if private else ("PUBLIC KEY",)
    if block is None or block.group(1) not in labels:
        raise ConfigError("flags", [f"{flag} {shown_path} is not a cosign {wanted.lower()} (PEM); {make}"])
    try:
        body = base64.b64decode(re.sub(r"\s", "", block.group(2)), validate=True)
    except binascii.Error:
        body = b""
    problem = (
        "its PEM body is not base64"
        if not body
        else _private_key_problem(body)
        if private
        else _public_key_problem(block.group(0).encode())
    )
    if problem:
        raise ConfigError("flags", [f"{flag} {shown_path} is not a cosign {wanted.lower()}: {problem}; {make}"])
    if private and PASSWORD_ENV not in env:
        raise ConfigError(
            "flags", [f"{flag} needs the key's password in {PASSWORD_ENV} (export {PASSWORD_ENV}= for none)"]
        )


def check_key_flags(
    *, sign_key: Path | None, smoke_report: Path | None, verify_key: Path | None, env: Mapping[str, str]
) -> None:
    """Raises:
    ConfigError: a key flag names no key of its kind, a private key without ``COSIGN_PASSWORD``, or
        ``--smoke-report`` without ``--sign-key`` or naming no regular file holding a ``--json-file`` report
        (``report.READ_BACK_SCHEMA``).
    """
    if sign_key is not None:
        check_key(sign_key, flag="--sign-key", private=True, env=env)
    if smoke_report is not None and sign_key is None:
        raise ConfigError("flags", ["--smoke-report needs --sign-key (it is attached as a signed attestation)"])
    if smoke_report is not None:
        what = "a 'tools/matrix run/test --json-file' report (--smoke-report)"
        text = read_config_text(smoke_report, limit=64 * 1024 * 1024, what=what)
        try:
            doc = jsontext.loads(text)
        except ValueError as exc:
            raise ConfigError(str(smoke_report), [f"is not JSON ({exc}); pass {what}"]) from exc
        untrusted.check_shape(doc, READ_BACK_SCHEMA, source=str(smoke_report), what=what)
    if verify_key is not None:
        check_key(verify_key, flag="--verify-key", private=False, env=env)


def sign_argv(cosign: str, ref: str, key: Path) -> list[str]:
    """``cosign sign`` of ``ref`` (by digest) with the private ``key``."""
    return [cosign, "sign", "--key", str(key), *NO_TLOG_SIGN, ref]


def attest_argv(cosign: str, ref: str, key: Path, attachment: Attachment) -> list[str]:
    """``cosign attest`` of ``attachment`` to ``ref`` (by digest) with the private ``key``."""
    return [
        cosign, "attest", "--key", str(key), "--type", attachment.predicate_type,
        "--predicate", str(attachment.path), *NO_TLOG_SIGN, ref,
    ]  # fmt: skip


def verify_argv(cosign: str, ref: str, pub: Path) -> list[str]:
    """``cosign verify`` of ``ref`` against the public key ``pub`` (prints the verified payloads as JSON)."""
    return [cosign, "verify", "--key", str(pub), *NO_TLOG_VERIFY, "--output", "json", ref]


def verify_attestation_argv(cosign: str, ref: str, pub: Path, predicate_type: str) -> list[str]:
    """``cosign verify-attestation`` of ``ref``'s attestations of ``predicate_type`` against ``pub``."""
    return [cosign, "verify-attestation", "--key", str(pub), "--type", predicate_type, *NO_TLOG_VERIFY, ref]


def run_cosign(argv: Sequence[str], env: Mapping[str, str], *, timeout: float = COSIGN_TIMEOUT_S) -> process.Completed:
    """Run ``argv`` (echoed on stderr by the program's name) with ``env``, no stdin (cosign never prompts), at
    most ``timeout`` seconds (then exit 124, the reason on stderr)."""
    process.echo([Path(argv[0]).name, *argv[1:]])
    return process.run(argv, env=env, timeout=timeout, quiet=True)


def _reason(proc: process.Completed) -> str:
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith("error")]
    return (errors or lines or [f"exit {proc.returncode}"])[-1][:500]


def sign_and_attest(ref: str, *, key: Path, attachments: Sequence[Attachment], env: Mapping[str, str]) -> Signed:
    """Sign ``ref`` (``name@sha256:…``) and attach each of ``attachments``.

    Raises EngineUnreachableError: cosign is missing; RegistryError: cosign failed (the registry refused, or the
    password does not open the key: the message has cosign's reason)."""
    cosign = find_cosign(env)
    steps = [sign_argv(cosign, ref, key)] + [attest_argv(cosign, ref, key, a) for a in attachments]
    for argv in steps:
        proc = run_cosign(argv, env)
        if proc.returncode != 0:
            raise RegistryError(f"cosign {argv[1]} of {ref} failed: {_reason(proc)}", ref=ref)
    return Signed(ref=ref, attestations=tuple(a.predicate_type for a in attachments))


# A cosign simple-signing payload as ``_signed_digests`` reads it: the signed image's manifest digest.
_SIMPLE_SIGNING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["critical"],
    "properties": {
        "critical": {
            "type": "object",
            "required": ["image"],
            "properties": {
                "image": {
                    "type": "object",
                    "required": ["docker-manifest-digest"],
                    "properties": {"docker-manifest-digest": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}},
                }
            },
        }
    },
}


def _signed_digests(stdout: str) -> list[str]:
    """The image digests of the simple-signing payloads cosign verify printed (one JSON document a line);
    a payload of another shape names none."""
    digests = []
    for line in stdout.splitlines():
        try:
            payloads: Any = jsontext.loads(line)
        except ValueError:
            continue
        for payload in payloads if isinstance(payloads, list) else [payloads]:
            if untrusted.shape_problems(payload, _SIMPLE_SIGNING_SCHEMA, limit=1):
                continue  # no simple-signing payload with an image digest: names no signed image
            digests.append(payload["critical"]["image"]["docker-manifest-digest"])
    return digests


def verify(ref: str, *, pub: Path, env: Mapping[str, str], attestations: Sequence[str] = ()) -> Verified:
    """Verify that ``ref`` (a tag or a digest, in a registry) is signed by the key ``pub``, and that each predicate
    type of ``attestations`` is attached and signed by it too.

    Raises EngineUnreachableError: cosign is missing; UnverifiedError: no signature of that key (unsigned, another key,
    a re-pointed tag), or the registry lacks the image (the message has cosign's reason)."""
    cosign = find_cosign(env)
    proc = run_cosign(verify_argv(cosign, ref, pub), env)
    digests = _signed_digests(proc.stdout)
    if proc.returncode != 0 or not digests:
        raise UnverifiedError(
            f"{ref} is not signed by {pub}: {_reason(proc)}; it may be unsigned, signed by another key, or its tag "
            "may name another image than the one signed: do not use it"
        )
    for predicate_type in attestations:
        attested = run_cosign(verify_attestation_argv(cosign, ref, pub, predicate_type), env)
        if attested.returncode != 0:
            raise UnverifiedError(f"{ref} has no {predicate_type} attestation signed by {pub}: {_reason(attested)}")
    return Verified(ref=ref, digest=digests[0])


def check_local_matches(image_attrs: Mapping[str, Any], verified: Verified) -> None:
    """The engine's image (its ``RepoDigests``) is the verified one: a local tag may name another image than the
    registry's signed digest (re-tagged or rebuilt on this engine). Raises UnverifiedError: no repo digest of the local
    image is ``verified.digest``."""
    digests = [str(d).partition("@")[2] for d in image_attrs.get("RepoDigests") or ()]
    if verified.digest not in digests:
        raise UnverifiedError(
            f"the engine's {verified.ref} is not the signed image {verified.digest} (its digests: "
            f"{', '.join(digests) or 'none: built or re-tagged here'}); remove it and pull the signed one"
        )
