"""The software bill of materials of an image: what is really installed, read inside the image, written as a
CycloneDX 1.6 JSON document bound to the image, and compared with a published one.

``read_inventory`` runs ``incontainer/sbom_inventory.py`` (standard library only) in a labelled container that
is always removed, with no network and a timeout, and reads its one bounded line of output. ``to_bom`` turns
the inventory into a CycloneDX document (cyclonedx-python-lib; package URLs by packageurl-python):

- the metadata component is the image (type ``container``): its image ID (the config digest) as the version,
  its registry digests where the engine knows any, the variant and platform as properties;
- each Python distribution is a ``library`` with a ``pkg:pypi`` purl, its license (``License-Expression``, a
  one-line ``License`` or the ``License ::`` classifiers), ``INSTALLER``, and as its SHA-256 hash the digest
  of its ``RECORD`` file (which lists the SHA-256 of every file it installed: a changed file changes it);
- each Debian package is a ``library`` with a ``pkg:deb/debian`` purl (arch, distro), its source package, and
  the licenses of its machine-readable ``copyright`` file.

``compare`` says what differs between two such documents, package by package.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import docker
from cyclonedx.contrib.license.exceptions import InvalidSpdxLicenseException
from cyclonedx.contrib.license.factories import LicenseFactory
from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.contact import OrganizationalEntity
from cyclonedx.model.license import DisjunctiveLicense, LicenseExpression
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from matrixtool import __version__
from matrixtool.core import jsontext, outputs
from matrixtool.core.errors import ExitCode, MatrixError

PROGRAM = Path(__file__).parent.parent / "incontainer" / "sbom_inventory.py"
MARKER = "MATRIX-SBOM "
# Labels of the inventory container; the value of OWNER is the session's MATRIX_OWNER (as the smoke executor's).
PURPOSE_LABEL = "io.vllm-matrix.purpose"
OWNER_LABEL = "io.vllm-matrix.owner"
OWNER_ENV_VAR = "MATRIX_OWNER"
TIMEOUT_S = 180
# The inventory of the CPU image is about 100 kB; anything past this is not the program's output.
MAX_OUTPUT = 16 * 1024 * 1024
PROPERTY_PREFIX = "vllm-matrix:"
TOOL_NAME = "vllm-image-matrix"


class SbomError(MatrixError):
    """The inventory could not be read from an image, or an SBOM document is not one this tool can compare."""

    exit_code = ExitCode.SBOM


class SbomDiffers(MatrixError):
    """``sbom --compare``: the packages of the image are not those of the published SBOM."""

    exit_code = ExitCode.SBOM_DIFFERS


@dataclass(frozen=True, kw_only=True)
class PythonDist:
    """One installed Python distribution (a ``*.dist-info`` folder); ``size``: bytes, from RECORD's sizes."""

    name: str
    version: str
    license: str
    license_source: str
    installer: str
    record_sha256: str
    files: int
    size: int
    path: str
    summary: str = ""


@dataclass(frozen=True, kw_only=True)
class DebianPackage:
    """One installed Debian package (``/var/lib/dpkg/status``); ``installed_size_kib``: dpkg's Installed-Size."""

    name: str
    version: str
    arch: str
    source: str
    source_version: str
    licenses: tuple[str, ...]
    installed_size_kib: int


@dataclass(frozen=True, kw_only=True)
class ImageIdentity:
    """The image an SBOM describes: ``image_id`` is the engine's ID (``sha256:`` config digest), ``repo_digests``
    the ``name@sha256:…`` manifest digests the engine recorded on pull or push (empty for a local build)."""

    ref: str
    image_id: str
    repo_digests: tuple[str, ...]
    platform: str


@dataclass(frozen=True, kw_only=True)
class Inventory:
    """What ``sbom_inventory.py`` found in ``image``; ``os``: /etc/os-release's ID, VERSION_ID, VERSION_CODENAME."""

    image: ImageIdentity
    os: Mapping[str, str]
    python: tuple[PythonDist, ...]
    debian: tuple[DebianPackage, ...]


# --- reading the image ---------------------------------------------------------------------------------------
def identify(client: docker.DockerClient, ref: str) -> ImageIdentity:
    """The identity of the local image ``ref``.

    Raises:
        SbomError: the engine has no image ``ref`` (the message names the pull or build to run).
    """
    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound as exc:
        raise SbomError(f"no image {ref!r} on this engine; build it ('tools/matrix build') or pull it first") from exc
    attrs = image.attrs
    platform = f"{attrs.get('Os', 'linux')}/{attrs.get('Architecture', '')}"
    if attrs.get("Variant"):
        platform += f"/{attrs['Variant']}"
    return ImageIdentity(
        ref=ref, image_id=str(image.id), repo_digests=tuple(sorted(attrs.get("RepoDigests") or ())), platform=platform
    )


def container_kwargs(ref: str, *, owner: str) -> dict[str, Any]:
    """The ``containers.create`` arguments of the inventory container: the program as ``python3 -c``, no network,
    the image's own user, labelled (purpose ``sbom``, ``owner``)."""
    return {
        "image": ref,
        "entrypoint": ["python3", "-c", PROGRAM.read_text(encoding="utf-8")],
        "command": [],
        "network_mode": "none",
        "labels": {PURPOSE_LABEL: "sbom", OWNER_LABEL: owner},
    }


def _bounded(chunks: Iterable[bytes], limit: int = MAX_OUTPUT) -> bytes:
    """The first ``limit`` bytes of a stream of chunks (the rest is not read)."""
    data = bytearray()
    for chunk in chunks:
        data += chunk[: limit - len(data)]
        if len(data) >= limit:
            break
    return bytes(data)


def parse_output(output: str) -> dict[str, Any]:
    """The inventory document of the program's output (its last ``MATRIX-SBOM`` line).

    Raises:
        SbomError: no such line, or it is not a JSON object with ``python`` and ``debian`` lists.
    """
    lines = [line for line in output.splitlines() if line.startswith(MARKER)]
    if not lines:
        tail = output.strip()[-500:]
        raise SbomError(f"the inventory program printed no {MARKER.strip()} line; its output ends: {tail!r}")
    try:
        doc = jsontext.loads(lines[-1][len(MARKER) :])
    except ValueError as exc:
        raise SbomError(f"the inventory line is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("python"), list) or not isinstance(doc.get("debian"), list):
        raise SbomError("the inventory line is not an object with 'python' and 'debian' lists")
    return doc


def inventory_of(identity: ImageIdentity, doc: Mapping[str, Any]) -> Inventory:
    """The ``Inventory`` of a parsed program document (``parse_output``) for ``identity``."""
    python = tuple(
        PythonDist(
            name=str(d.get("name", "")),
            version=str(d.get("version", "")),
            license=str(d.get("license", "")),
            license_source=str(d.get("license_source", "")),
            installer=str(d.get("installer", "")),
            record_sha256=str(d.get("record_sha256", "")),
            files=int(d.get("files", 0)),
            size=int(d.get("size", 0)),
            path=str(d.get("path", "")),
            summary=str(d.get("summary", "")),
        )
        for d in doc["python"]
        if d.get("name")
    )
    debian = tuple(
        DebianPackage(
            name=str(p.get("name", "")),
            version=str(p.get("version", "")),
            arch=str(p.get("arch", "")),
            source=str(p.get("source", "")),
            source_version=str(p.get("source_version", "")),
            licenses=tuple(str(x) for x in p.get("licenses", ())),
            installed_size_kib=int(p.get("installed_size_kib", 0)),
        )
        for p in doc["debian"]
        if p.get("name")
    )
    return Inventory(
        image=identity, os={str(k): str(v) for k, v in (doc.get("os") or {}).items()}, python=python, debian=debian
    )


def read_inventory(
    client: docker.DockerClient, ref: str, *, env: Mapping[str, str] | None = None, timeout: float = TIMEOUT_S
) -> Inventory:
    """Run the inventory program in ``ref`` (a container that is removed whatever happens) and read its output.

    ``timeout``: seconds before the container is killed.

    Raises:
        SbomError: no such image, the image has no ``python3``, the program failed or timed out.
    """
    identity = identify(client, ref)
    owner = (env if env is not None else os.environ).get(OWNER_ENV_VAR, "")
    container = client.containers.create(**container_kwargs(ref, owner=owner))
    try:
        try:
            container.start()
        except docker.errors.APIError as exc:  # no python3 in the image: the engine cannot start it
            raise SbomError(f"cannot run python3 in {ref}: {exc.explanation or exc}") from exc
        try:
            status = container.wait(timeout=timeout)
        except Exception as exc:  # requests' ReadTimeout, or the engine went away
            raise SbomError(f"the inventory of {ref} did not finish within {timeout:.0f} s ({exc})") from exc
        output = _bounded(container.logs(stdout=True, stderr=False, stream=True, follow=False)).decode(
            "utf-8", "replace"
        )
        if status.get("StatusCode") != 0:
            errors = _bounded(container.logs(stdout=False, stderr=True, stream=True, follow=False)).decode(
                "utf-8", "replace"
            )
            raise SbomError(
                f"the inventory program failed in {ref} (exit {status.get('StatusCode')}): {errors.strip()[-2000:]}; "
                "the image needs a python3 on its PATH"
            )
    finally:
        container.remove(force=True)
    return inventory_of(identity, parse_output(output))


# --- the CycloneDX document ----------------------------------------------------------------------------------
def _normal_name(name: str) -> str:
    """PEP 503 normalised name (the form of a pypi purl)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def python_purl(dist: PythonDist) -> PackageURL:
    return PackageURL(type="pypi", name=_normal_name(dist.name), version=dist.version)


def debian_purl(package: DebianPackage, os_release: Mapping[str, str]) -> PackageURL:
    qualifiers = {"arch": package.arch}
    if os_release.get("VERSION_ID"):
        qualifiers["distro"] = f"{os_release.get('ID', 'debian')}-{os_release['VERSION_ID']}"
    return PackageURL(type="deb", namespace="debian", name=package.name, version=package.version, qualifiers=qualifiers)


def image_purl(identity: ImageIdentity) -> PackageURL:
    """``pkg:oci/<name>@<digest>``: the registry digest where there is one, else the image ID."""
    name = identity.ref.split("@")[0].rsplit(":", 1)[0] if ":" in identity.ref.split("/")[-1] else identity.ref
    digest = identity.repo_digests[0].split("@", 1)[1] if identity.repo_digests else identity.image_id
    qualifiers = {"repository_url": name}
    arch = identity.platform.split("/")[1] if "/" in identity.platform else ""
    if arch:
        qualifiers["arch"] = arch
    return PackageURL(type="oci", name=name.rsplit("/", 1)[-1], version=digest, qualifiers=qualifiers)


def _python_licenses(text: str) -> list[LicenseExpression | DisjunctiveLicense]:
    return [LicenseFactory().make_from_string(text)] if text else []


def _debian_licenses(names: Iterable[str]) -> list[DisjunctiveLicense]:
    factory = LicenseFactory()
    licenses: list[DisjunctiveLicense] = []
    for name in names:
        try:
            licenses.append(factory.make_with_id(name))
        except InvalidSpdxLicenseException:
            licenses.append(factory.make_with_name(name))
    return licenses


def _props(**values: object) -> list[Property]:
    return [Property(name=PROPERTY_PREFIX + k.replace("_", "-"), value=str(v)) for k, v in values.items() if v != ""]


def to_bom(inventory: Inventory, *, variant: str, serial: uuid.UUID | None = None) -> Bom:
    """The CycloneDX document of ``inventory``, its metadata component the image (see the module docstring)."""
    identity = inventory.image
    root = Component(
        type=ComponentType.CONTAINER,
        name=identity.ref.split("@")[0],
        version=identity.image_id,
        bom_ref=f"image:{identity.image_id}",
        purl=image_purl(identity),
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=identity.image_id.removeprefix("sha256:"))],
        properties=_props(
            variant=variant,
            platform=identity.platform,
            image_id=identity.image_id,
            **{f"repo_digest_{i}": d for i, d in enumerate(identity.repo_digests)},
        ),
    )
    components: list[Component] = []
    seen: set[str] = set()

    def unique(ref: str) -> str:
        n, candidate = 1, ref
        while candidate in seen:
            n += 1
            candidate = f"{ref}#{n}"
        seen.add(candidate)
        return candidate

    if inventory.os.get("ID"):
        components.append(
            Component(
                type=ComponentType.OPERATING_SYSTEM,
                name=inventory.os["ID"],
                version=inventory.os.get("VERSION_ID", ""),
                bom_ref=unique(f"os:{inventory.os['ID']}-{inventory.os.get('VERSION_ID', '')}"),
                description=inventory.os.get("PRETTY_NAME") or None,
            )
        )
    for dist in sorted(inventory.python, key=lambda d: (_normal_name(d.name), d.version, d.path)):
        purl = python_purl(dist)
        components.append(
            Component(
                type=ComponentType.LIBRARY,
                name=dist.name,
                version=dist.version,
                bom_ref=unique(purl.to_string()),
                purl=purl,
                description=dist.summary or None,
                licenses=_python_licenses(dist.license),
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=dist.record_sha256)] if dist.record_sha256 else [],
                properties=_props(
                    kind="python",
                    installer=dist.installer,
                    license_source=dist.license_source,
                    hash_of="RECORD" if dist.record_sha256 else "",
                    record_files=dist.files,
                    size_bytes=dist.size,
                    path=dist.path,
                ),
            )
        )
    for package in sorted(inventory.debian, key=lambda p: (p.name, p.arch)):
        purl = debian_purl(package, inventory.os)
        components.append(
            Component(
                type=ComponentType.LIBRARY,
                name=package.name,
                version=package.version,
                bom_ref=unique(purl.to_string()),
                purl=purl,
                licenses=_debian_licenses(package.licenses),
                properties=_props(
                    kind="debian",
                    source=package.source,
                    source_version=package.source_version,
                    installed_size_kib=package.installed_size_kib,
                ),
            )
        )
    bom = Bom(components=components, serial_number=serial)
    bom.metadata.component = root
    bom.metadata.tools.components.add(
        Component(type=ComponentType.APPLICATION, name=TOOL_NAME, version=__version__, supplier=None)
    )
    bom.metadata.supplier = OrganizationalEntity(name=TOOL_NAME)
    bom.register_dependency(root, components)
    return bom


def to_json(bom: Bom) -> str:
    """The CycloneDX 1.6 JSON text of ``bom`` (indented, with a final newline)."""
    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"


def write(text: str, path: Path) -> Path:
    """Write ``text`` to ``path`` whole (``outputs.write_text``); the path.

    Raises:
        OutputError: it cannot be written (exit 3); ``path`` is unchanged.
    """
    return outputs.write_text(path, text)


def report_path(out_dir: Path, variant: str) -> Path:
    """Where a run writes the SBOM of ``variant``'s image: ``<out>/reports/sbom-<variant>.cdx.json``."""
    return out_dir / "reports" / f"sbom-{variant}.cdx.json"


def write_report(client: docker.DockerClient, ref: str, variant: str, *, out_dir: Path) -> Path:
    """Derive the SBOM of image ``ref`` and write it as ``report_path(out_dir, variant)``; the path.

    Raises:
        SbomError: the inventory could not be read (``read_inventory``).
    """
    bom = to_bom(read_inventory(client, ref), variant=variant)
    return write(to_json(bom), report_path(out_dir, variant))


# --- summary and comparison ----------------------------------------------------------------------------------
class Kind(str, Enum):
    PYTHON = "python"
    DEBIAN = "debian"
    OTHER = "other"


@dataclass(frozen=True, kw_only=True)
class Package:
    """One component of an SBOM document, as ``compare`` sees it: ``key`` is ``<purl type>/<name>`` (the purl
    without version and qualifiers other than ``arch``), ``sha256`` the component's SHA-256 hash ('' if none)."""

    key: str
    kind: Kind
    name: str
    version: str
    sha256: str
    size: int


def _property(component: Mapping[str, Any], name: str) -> str:
    for prop in component.get("properties") or ():
        if isinstance(prop, Mapping) and prop.get("name") == PROPERTY_PREFIX + name:
            return str(prop.get("value", ""))
    return ""


def packages_of(doc: Mapping[str, Any]) -> dict[str, Package]:
    """The packages of a CycloneDX JSON document (any producer's: components with a ``pkg:pypi`` or ``pkg:deb``
    purl), by key. A key seen twice (one distribution in two folders) gets ``#2``, ``#3``.

    Raises:
        SbomError: ``doc`` is not a CycloneDX document.
    """
    if not isinstance(doc, Mapping) or doc.get("bomFormat") != "CycloneDX":
        raise SbomError('not a CycloneDX document (no "bomFormat": "CycloneDX")')
    found: dict[str, Package] = {}
    for component in doc.get("components") or ():
        if not isinstance(component, Mapping):
            continue
        purl_text = component.get("purl")
        if not isinstance(purl_text, str):
            continue
        try:
            purl = PackageURL.from_string(purl_text)
        except ValueError:
            continue
        kind = {"pypi": Kind.PYTHON, "deb": Kind.DEBIAN}.get(purl.type, Kind.OTHER)
        name = _normal_name(purl.name) if kind is Kind.PYTHON else purl.name
        arch = (purl.qualifiers or {}).get("arch") if isinstance(purl.qualifiers, dict) else None
        key = f"{purl.type}/{name}" + (f":{arch}" if arch else "")
        sha = next((str(h.get("content", "")) for h in component.get("hashes") or () if h.get("alg") == "SHA-256"), "")
        size_text = _property(component, "size-bytes") or ""
        kib = _property(component, "installed-size-kib") or ""
        size = int(size_text) if size_text.isdigit() else int(kib) * 1024 if kib.isdigit() else 0
        n, unique = 1, key
        while unique in found:
            n += 1
            unique = f"{key}#{n}"
        found[unique] = Package(
            key=unique, kind=kind, name=name, version=str(purl.version or ""), sha256=sha, size=size
        )
    return found


def image_of(doc: Mapping[str, Any]) -> str:
    """The image ID (version of the metadata component) a document is bound to ('' if none)."""
    component = (doc.get("metadata") or {}).get("component") or {}
    return str(component.get("version", "")) if isinstance(component, Mapping) else ""


@dataclass(frozen=True, kw_only=True)
class Change:
    """A package in both documents whose ``field`` (``version`` or ``sha256``) differs."""

    key: str
    field: str
    published: str
    derived: str


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """What differs between a published SBOM and one derived now: ``added`` are only in the derived one."""

    published_image: str
    derived_image: str
    added: tuple[Package, ...]
    removed: tuple[Package, ...]
    changed: tuple[Change, ...]

    @property
    def same(self) -> bool:
        return not (self.added or self.removed or self.changed)


def compare(published: Mapping[str, Any], derived: Mapping[str, Any]) -> Comparison:
    """Compare two CycloneDX documents package by package (``packages_of``): added, removed, and for packages in
    both a changed version or (where both have one) a changed SHA-256.

    Raises:
        SbomError: either is not a CycloneDX document.
    """
    old, new = packages_of(published), packages_of(derived)
    changed: list[Change] = []
    for key in sorted(old.keys() & new.keys()):
        a, b = old[key], new[key]
        if a.version != b.version:
            changed.append(Change(key=key, field="version", published=a.version, derived=b.version))
        elif a.sha256 and b.sha256 and a.sha256 != b.sha256:
            changed.append(Change(key=key, field="sha256", published=a.sha256, derived=b.sha256))
    return Comparison(
        published_image=image_of(published),
        derived_image=image_of(derived),
        added=tuple(new[k] for k in sorted(new.keys() - old.keys())),
        removed=tuple(old[k] for k in sorted(old.keys() - new.keys())),
        changed=tuple(changed),
    )


def comparison_lines(result: Comparison) -> list[str]:
    """``result`` as lines for the terminal: one per package that differs, then a count."""
    lines = []
    if result.published_image != result.derived_image:
        lines.append(f"image: published {result.published_image or '?'}, derived {result.derived_image or '?'}")
    lines += [f"+ {p.key} {p.version}" for p in result.added]
    lines += [f"- {p.key} {p.version}" for p in result.removed]
    lines += [f"~ {c.key} {c.field}: {c.published} -> {c.derived}" for c in result.changed]
    lines.append(
        "no package differs"
        if result.same
        else f"{len(result.added)} added, {len(result.removed)} removed, {len(result.changed)} changed"
    )
    return lines


@dataclass(frozen=True, kw_only=True)
class Summary:
    """Counts of an SBOM's packages by kind, and the largest (bytes: RECORD sizes, dpkg's Installed-Size)."""

    counts: Mapping[str, int]
    largest: tuple[Package, ...]


def summarize(doc: Mapping[str, Any], *, top: int = 10) -> Summary:
    """The ``Summary`` of a CycloneDX document (``top`` largest packages)."""
    packages = list(packages_of(doc).values())
    counts: dict[str, int] = {}
    for p in packages:
        counts[p.kind.value] = counts.get(p.kind.value, 0) + 1
    largest = tuple(sorted(packages, key=lambda p: -p.size)[:top])
    return Summary(counts=counts, largest=largest)
