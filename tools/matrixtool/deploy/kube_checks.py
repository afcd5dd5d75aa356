"""Checks of rendered manifests, and their YAML: ``validate`` against the Kubernetes OpenAPI schemas with
kubernetes-validate; ``pss_restricted_problems`` applies the Pod Security Standard "restricted" rules, written
here from https://kubernetes.io/docs/concepts/security/pod-security-standards/ (no library ships them);
``scc_restricted_v2_problems`` what OpenShift's restricted-v2 SCC refuses, from the SCC object itself
(openshift/cluster-kube-apiserver-operator
``bindata/bootkube/scc-manifests/0000_20_kube-apiserver-operator_00_scc-restricted-v2.yaml``); ``to_yaml`` for
``kubectl apply -f``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence, Set
from typing import Any

import kubernetes_validate
import yaml

from matrixtool.deploy.kube_pod import USER_ANNOTATION

# The Kubernetes version the manifests are validated against (kubernetes-validate bundles its schemas).
K8S_VERSION = "1.33.0"
# PSS restricted: the only volume types allowed.
PSS_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
# restricted-v2: the volume types it allows (its ``volumes``), the one capability a container may add
# (``allowedCapabilities``), and the pod fields whose values it takes from the namespace's annotations
# (``runAsUser: MustRunAsRange``: openshift.io/sa.scc.uid-range; ``fsGroup: MustRunAs``:
# openshift.io/sa.scc.supplemental-groups; ``seLinuxContext: MustRunAs``: openshift.io/sa.scc.mcs). A manifest
# that sets one asks for a value the namespace may not hold, and is refused where it does not.
SCC_VOLUMES = PSS_VOLUMES | {"image"}
SCC_ADDABLE = frozenset({"NET_BIND_SERVICE"})
SCC_RANGED = ("runAsUser", "fsGroup", "seLinuxOptions")


def validate(docs: Sequence[Mapping[str, Any]], version: str = K8S_VERSION) -> list[str]:
    """Problems of ``docs`` against the Kubernetes ``version`` OpenAPI schemas (kubernetes-validate, strict:
    unknown fields are problems too); empty when every document is valid."""
    problems = []
    for doc in docs:
        try:
            kubernetes_validate.validate(dict(doc), version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{doc.get('kind')} {doc.get('metadata', {}).get('name')}: {exc.message}")
    return problems


def pss_restricted_problems(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where a Deployment or Job of ``docs`` breaks the Pod Security Standard "restricted" (and so "baseline").

    The rules, from the standard's table: no host namespaces or hostPath, volume types of ``PSS_VOLUMES``
    only, no privileged container or host ports, ``allowPrivilegeEscalation: false``, ``runAsNonRoot: true``
    with a non-zero ``runAsUser``, seccomp ``RuntimeDefault`` or ``Localhost``, capabilities ``drop: [ALL]``
    and none added but ``NET_BIND_SERVICE``."""
    problems = []
    for where, _, spec in _pods(docs):
        pod_sec = spec.get("securityContext", {})
        problems += _host_and_volume_problems(where, spec, PSS_VOLUMES, "host namespaces are forbidden")
        for container in spec.get("containers", []):
            sec = container.get("securityContext", {})
            name = f"{where} container {container['name']}"
            if sec.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{name}: allowPrivilegeEscalation must be false")
            non_root = sec.get("runAsNonRoot", pod_sec.get("runAsNonRoot"))
            if non_root is not True:
                problems.append(f"{name}: runAsNonRoot must be true")
            if sec.get("runAsUser", pod_sec.get("runAsUser")) == 0:
                problems.append(f"{name}: runAsUser 0")
            seccomp = sec.get("seccompProfile", pod_sec.get("seccompProfile", {})).get("type")
            if seccomp not in ("RuntimeDefault", "Localhost"):
                problems.append(f"{name}: seccompProfile.type must be RuntimeDefault or Localhost (is {seccomp})")
            caps = sec.get("capabilities", {})
            if "ALL" not in caps.get("drop", []):
                problems.append(f"{name}: capabilities must drop ALL")
            if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
                problems.append(f"{name}: capabilities add {caps['add']}")
    return problems


def scc_restricted_v2_problems(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where a Deployment or Job of ``docs`` would be refused by OpenShift's restricted-v2 SCC in any namespace.

    The SCC's rules: no host namespaces, host ports, privileged containers or hostPath (volume types of
    ``SCC_VOLUMES`` only); ``allowPrivilegeEscalation`` not true; capabilities added only from ``SCC_ADDABLE``
    (``drop: [ALL]`` is required, and defaulted where absent); seccomp ``RuntimeDefault`` only (defaulted where
    absent); none of ``SCC_RANGED`` set, in the pod or a container (the namespace's ranges decide them).

    A pod that runs as root (``runAsUser: 0``, or the profile's user ``0[:GID]`` in ``USER_ANNOTATION``, where the
    OpenShift manifest keeps it) is refused as well: the SCC admits it, but runs it as a non-root UID from the
    namespace's range (``runAsUser: MustRunAsRange``), so the checks that passed as root did not run under what
    runs. A pod that names no user runs as its image's, which the manifest does not state (this tool's images run
    as 1000:0, templates/Dockerfile.j2): not judged here."""
    problems = []
    for where, template, spec in _pods(docs):
        pod_sec = spec.get("securityContext", {})
        if _runs_as_root(template, spec):
            problems.append(
                f"{where}: runs as root; restricted-v2 assigns a non-root UID from the namespace range, so the "
                "conditions the checks passed under are not what runs; run the checks under a non-root profile, or "
                "grant the anyuid SCC"
            )
        problems += _host_and_volume_problems(where, spec, SCC_VOLUMES, "restricted-v2 allows no host namespace")
        problems += [
            f"{where}: securityContext.{key} is set; restricted-v2 assigns it from the namespace's range"
            for key in SCC_RANGED
            if key in pod_sec
        ]
        for container in spec.get("containers", []):
            sec = container.get("securityContext", {})
            name = f"{where} container {container['name']}"
            problems += [
                f"{name}: securityContext.{key} is set; restricted-v2 assigns it from the namespace's range"
                for key in SCC_RANGED
                if key in sec
            ]
            if sec.get("allowPrivilegeEscalation") is True:
                problems.append(f"{name}: allowPrivilegeEscalation is true")
            added = set(sec.get("capabilities", {}).get("add", [])) - SCC_ADDABLE
            if added:
                problems.append(f"{name}: capabilities add {sorted(added)}")
            seccomp = sec.get("seccompProfile", pod_sec.get("seccompProfile", {})).get("type")
            if seccomp not in (None, "RuntimeDefault"):
                problems.append(f"{name}: seccompProfile.type {seccomp} (restricted-v2 allows runtime/default only)")
    return problems


class _NoAliases(yaml.SafeDumper):
    """A dumper that writes shared values out (no ``&id001`` anchors: kubectl reads them, people do not)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(docs: Sequence[Mapping[str, Any]]) -> str:
    """``docs`` as one multi-document YAML file (``kubectl apply -f``)."""
    return yaml.dump_all([dict(d) for d in docs], Dumper=_NoAliases, sort_keys=False)


def _pods(docs: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    """Each Deployment or Job of ``docs``: its name for messages ("Deployment NAME"), its pod template and spec."""
    for doc in docs:
        if doc.get("kind") in ("Deployment", "Job"):
            template = doc["spec"]["template"]
            yield f"{doc['kind']} {doc['metadata']['name']}", template, template["spec"]


def _host_and_volume_problems(where: str, spec: Mapping[str, Any], volumes: Set[str], why: str) -> list[str]:
    """What both policies refuse alike in the pod ``spec``: host namespaces (``why`` says which policy), volume
    types other than ``volumes``, privileged containers and host ports."""
    problems = [f"{where}: {key} is true ({why})" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= volumes:
            problems.append(f"{where}: volume {volume['name']} is {', '.join(sorted(kinds))}")
    for container in spec.get("containers", []):
        name = f"{where} container {container['name']}"
        if container.get("securityContext", {}).get("privileged"):
            problems.append(f"{name}: privileged")
        if any("hostPort" in p for p in container.get("ports", [])):
            problems.append(f"{name}: a hostPort")
    return problems


def _runs_as_root(template: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """Whether the pod ``template`` (its ``spec``) states UID 0: ``runAsUser: 0`` in the pod's or a container's
    securityContext, or ``USER_ANNOTATION`` ``0`` / ``0:GID``."""
    contexts = [spec.get("securityContext", {})]
    contexts += [c.get("securityContext", {}) for c in spec.get("containers", [])]
    if any(sec.get("runAsUser") == 0 for sec in contexts):
        return True
    user = template.get("metadata", {}).get("annotations", {}).get(USER_ANNOTATION)
    return user is not None and str(user).partition(":")[0].strip() == "0"
