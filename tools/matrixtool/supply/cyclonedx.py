"""The CycloneDX 1.6 JSON document of an inventory (cyclonedx-python-lib; package URLs by packageurl-python),
bound to the image (see ``sbom``), and where a run writes it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

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
from matrixtool.core import outputs
from matrixtool.supply.inventory import DebianPackage, ImageIdentity, Inventory, PythonDist, read_inventory
from matrixtool.supply.sbom import PROPERTY_PREFIX, normal_name

TOOL_NAME = "vllm-image-matrix"


def python_purl(dist: PythonDist) -> PackageURL:
    return PackageURL(type="pypi", name=normal_name(dist.name), version=dist.version)


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
    """The CycloneDX document of ``inventory``, its metadata component the image (see ``sbom``)."""
    root = _image_component(inventory.image, variant)
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
    for dist in sorted(inventory.python, key=lambda d: (normal_name(d.name), d.version, d.path)):
        components.append(_python_component(dist, unique(python_purl(dist).to_string())))
    for package in sorted(inventory.debian, key=lambda p: (p.name, p.arch)):
        purl = debian_purl(package, inventory.os)
        components.append(_debian_component(package, purl, unique(purl.to_string())))
    bom = Bom(components=components, serial_number=serial)
    bom.metadata.component = root
    bom.metadata.tools.components.add(
        Component(type=ComponentType.APPLICATION, name=TOOL_NAME, version=__version__, supplier=None)
    )
    bom.metadata.supplier = OrganizationalEntity(name=TOOL_NAME)
    bom.register_dependency(root, components)
    return bom


def _image_component(identity: ImageIdentity, variant: str) -> Component:
    return Component(
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


def _python_component(dist: PythonDist, bom_ref: str) -> Component:
    return Component(
        type=ComponentType.LIBRARY,
        name=dist.name,
        version=dist.version,
        bom_ref=bom_ref,
        purl=python_purl(dist),
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


def _debian_component(package: DebianPackage, purl: PackageURL, bom_ref: str) -> Component:
    return Component(
        type=ComponentType.LIBRARY,
        name=package.name,
        version=package.version,
        bom_ref=bom_ref,
        purl=purl,
        licenses=_debian_licenses(package.licenses),
        properties=_props(
            kind="debian",
            source=package.source,
            source_version=package.source_version,
            installed_size_kib=package.installed_size_kib,
        ),
    )


def to_json(bom: Bom) -> str:
    """The CycloneDX 1.6 JSON text of ``bom`` (indented, with a final newline)."""
    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"


def write(text: str, path: Path) -> Path:
    """Raises OutputError: it cannot be written (exit 3); ``path`` is unchanged."""
    return outputs.write_text(path, text)


def report_path(out_dir: Path, variant: str) -> Path:
    """Where a run writes the SBOM of ``variant``'s image: ``<out>/reports/sbom-<variant>.cdx.json``."""
    return out_dir / "reports" / f"sbom-{variant}.cdx.json"


def report_text(client: docker.DockerClient, ref: str, variant: str) -> str:
    """The SBOM of ``ref`` as CycloneDX JSON. Raises SbomError: the inventory could not be read (``read_inventory``)."""
    return to_json(to_bom(read_inventory(client, ref), variant=variant))


def write_report(client: docker.DockerClient, ref: str, variant: str, *, out_dir: Path) -> Path:
    """``report_text`` to ``report_path``; returns the path. Raises SbomError: the inventory could not be read
    (``read_inventory``); OutputError: it cannot be written (exit 3)."""
    return write(report_text(client, ref, variant), report_path(out_dir, variant))
