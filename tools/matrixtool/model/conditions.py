"""Run conditions of a container, as one table (``ROWS``): a condition is one row (docs/profiles.md), its value
rule, flag, Docker setting and Kubernetes field (``pod``/``from_pod``: ``deploy.kube`` and ``kube_pod`` iterate the
rows). ``matrix.schema.json``'s ``$defs.profile.properties`` is generated from it (``profile_schema_properties``,
written by ``make docs``; a unit test fails on drift). ``Condition`` is the in-image one
(``vllm_smoke.declarations.Condition``): checks and rows name one set. Every ``parse`` raises ``ValueError`` saying
what to write instead; the caller names the key or flag, so a bad value ends in exit 3 before any engine call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from matrixtool.incontainer.vllm_smoke.declarations import Condition as Condition
from matrixtool.model import condition_pod as kpod
from matrixtool.model.condition_values import (
    SECCOMP_TYPES,
    parse_any_key,
    parse_bool,
    parse_capability,
    parse_cpus,
    parse_env_key,
    parse_env_value,
    parse_memory,
    parse_mount_point,
    parse_network,
    parse_nofile,
    parse_pids,
    parse_seccomp,
    parse_shm,
    parse_tmpfs_options,
    parse_user,
    split_env,
    split_tmpfs,
)


class Shape(str, Enum):
    """How values of a condition combine: merging profiles, and overrides from the command line.

    ``scalar``: replaced whole (``null`` resets to the engine's default); ``switch``: a boolean, ``--x/--no-x``;
    ``mapping``: merged entry by entry (``null`` removes an entry; a flag value adds or replaces one);
    ``list``: replaced whole (a repeated flag gives the whole list).
    """

    SCALAR = "scalar"
    SWITCH = "switch"
    MAPPING = "mapping"
    LIST = "list"


# --- the table ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Row:
    """Everything about one run condition.

    ``parse`` raises ValueError saying what to write; ``split``: a mapping flag's one value -> (key, value);
    ``docker``: the normal value -> ``containers.run`` kwargs (lists under one key are joined); ``kubernetes``
    says in words what ``pod`` writes into a pod's parts and ``from_pod`` reads back (None: not set; the round trip
    ``deploy.kube_pod``'s unit test proves); ``schema``: the value's JSON Schema (``matrix.schema.json``
    ``$defs.profile``).
    """

    condition: Condition
    shape: Shape
    parse: Callable[[Any], Any]
    flag: str
    help: str
    docker: Callable[[Any], dict[str, Any]]
    docker_text: str
    kubernetes: str
    pod: Callable[[kpod.PodParts, Any], None]
    from_pod: Callable[[kpod.PodParts], Any]
    describe: Callable[[Any], list[str]]
    schema: Mapping[str, Any]
    metavar: str | None = None
    flag_off: str | None = None
    parse_key: Callable[[Any], str] = parse_any_key
    split: Callable[[str], tuple[str, str]] | None = None

    @property
    def key(self) -> str:
        """The matrix.yaml key (and the Profile attribute)."""
        return self.condition.value

    @property
    def default(self) -> Any:
        """The value that leaves the engine's default in place."""
        return {Shape.SCALAR: None, Shape.SWITCH: False, Shape.MAPPING: {}, Shape.LIST: ()}[self.shape]


def _nullable(kind: str, description: str, **more: Any) -> dict[str, Any]:
    return {"type": [kind, "null"], **more, "description": description}


_STRING_MAP = {"type": ["object", "null"], "additionalProperties": {"type": ["string", "null"]}}

ROWS: tuple[Row, ...] = (
    Row(
        condition=Condition.USER,
        shape=Shape.SCALAR,
        parse=parse_user,
        flag="--user",
        metavar="UID[:GID]",
        help="Run as UID[:GID], e.g. 1000770000:0 (overrides the profile).",
        docker=lambda v: {"user": v},
        docker_text="`user=UID:GID` (`docker run --user`)",
        kubernetes="`securityContext.runAsUser` / `runAsGroup` (`runAsNonRoot: true` when UID is not 0)",
        pod=kpod.write_user,
        from_pod=kpod.read_user,
        describe=lambda v: [f"user {v}"],
        schema=_nullable(
            "string",
            'UID[:GID] the container runs as, e.g. "1000770000:0" (OpenShift\'s arbitrary UID with GID 0); '
            "null: the image's USER.",
        ),
    ),
    Row(
        condition=Condition.READ_ONLY,
        shape=Shape.SWITCH,
        parse=parse_bool,
        flag="--read-only",
        flag_off="--no-read-only",
        help="Read-only root filesystem or not.",
        docker=lambda on: {"read_only": True} if on else {},
        docker_text="`read_only=True` (`docker run --read-only`)",
        kubernetes="`securityContext.readOnlyRootFilesystem: true`",
        pod=lambda parts, on: parts.security.update(readOnlyRootFilesystem=bool(on)),
        from_pod=lambda parts: parts.security.get("readOnlyRootFilesystem") or None,
        describe=lambda on: ["read-only root"] if on else [],
        schema={
            "type": "boolean",
            "description": "Read-only root filesystem (docker run --read-only; Kubernetes readOnlyRootFilesystem).",
        },
    ),
    Row(
        condition=Condition.TMPFS,
        shape=Shape.MAPPING,
        parse=parse_tmpfs_options,
        parse_key=parse_mount_point,
        split=split_tmpfs,
        flag="--tmpfs",
        metavar="PATH[:OPTS]",
        help="Mount a tmpfs: PATH[:OPTS], e.g. /tmp:rw,exec (repeatable).",
        docker=lambda m: {"tmpfs": dict(m)} if m else {},
        docker_text="`tmpfs={PATH: OPTS}` (`docker run --tmpfs PATH:OPTS`)",
        kubernetes="an `emptyDir` volume (`medium: Memory`, `sizeLimit` from `size=`) and a `volumeMount` at PATH; "
        "an emptyDir is mounted exec, mode 1777: `noexec`, `mode=`, `uid=` have no field",
        pod=kpod.write_tmpfs,
        from_pod=kpod.read_tmpfs,
        describe=lambda m: [f"tmpfs {p}" + (f" ({o})" if o else "") for p, o in m.items()],
        schema={
            **_STRING_MAP,
            "propertyNames": {"pattern": "^/"},
            "description": 'Mount point -> tmpfs mount options ("rw,exec,size=4g"; "": Docker\'s defaults, which '
            "include noexec); null removes an inherited mount. /dev/shm is shm_size.",
        },
    ),
    Row(
        condition=Condition.MEMORY,
        shape=Shape.SCALAR,
        parse=parse_memory,
        flag="--memory",
        metavar="SIZE",
        help="Memory limit in Docker's units, e.g. 4g.",
        docker=lambda v: {"mem_limit": v},
        docker_text="`mem_limit` (`docker run --memory`)",
        kubernetes="`resources.limits.memory` (`4g` -> `4Gi`)",
        pod=lambda parts, v: parts.limits.update(memory=kpod.quantity(v)),
        from_pod=lambda parts: kpod.docker_size(m) if (m := parts.resources.get("limits", {}).get("memory")) else None,
        describe=lambda v: [f"memory {v}"],
        schema=_nullable("string", 'Memory limit in Docker\'s units ("4g", binary; at least 6m); null: none.'),
    ),
    Row(
        condition=Condition.CPUS,
        shape=Shape.SCALAR,
        parse=parse_cpus,
        flag="--cpus",
        metavar="CPUS",
        help="CPU quota in CPUs, e.g. 1.5.",
        docker=lambda v: {"nano_cpus": round(v * 1e9)},
        docker_text="`nano_cpus` = CPUs x 10^9 (`docker run --cpus`)",
        kubernetes="`resources.limits.cpu` in millicores (`1.5` -> `1500m`)",
        pod=lambda parts, v: parts.limits.update(cpu=f"{round(v * 1000)}m"),
        from_pod=kpod.read_cpus,
        describe=lambda v: [f"cpus {v:g}"],
        schema=_nullable(
            "number", "CPU quota in CPUs (docker run --cpus), 0.01 to 8192, at most three decimals; null: none."
        ),
    ),
    Row(
        condition=Condition.NETWORK,
        shape=Shape.SCALAR,
        parse=parse_network,
        flag="--network",
        metavar="MODE",
        help="Docker network mode, e.g. none.",
        docker=lambda v: {"network_mode": v},
        docker_text="`network_mode` (`docker run --network`)",
        kubernetes="no Pod field: `none` is a NetworkPolicy that selects the pod and allows no egress (the pod "
        "keeps an interface); `host` is `hostNetwork: true` (PSS baseline forbids it)",
        pod=kpod.write_network,
        from_pod=kpod.read_network,
        describe=lambda v: [f"network {v}"],
        schema=_nullable("string", 'Docker network mode ("none": no network); null: the engine\'s default bridge.'),
    ),
    Row(
        condition=Condition.SHM_SIZE,
        shape=Shape.SCALAR,
        parse=parse_shm,
        flag="--shm-size",
        metavar="SIZE",
        help="Size of /dev/shm in Docker's units, e.g. 1g (Docker's default: 64m).",
        docker=lambda v: {"shm_size": v},
        docker_text="`shm_size` (`docker run --shm-size`)",
        kubernetes="an `emptyDir` volume (`medium: Memory`, `sizeLimit`) and a `volumeMount` at `/dev/shm`",
        pod=kpod.write_shm,
        from_pod=kpod.read_shm,
        describe=lambda v: [f"shm {v}"],
        schema=_nullable("string", "Size of /dev/shm in Docker's units (\"1g\"); null: the engine's (Docker: 64m)."),
    ),
    Row(
        condition=Condition.CAP_DROP,
        shape=Shape.LIST,
        parse=parse_capability,
        flag="--cap-drop",
        metavar="CAP",
        help="Drop a Linux capability, e.g. ALL (repeatable).",
        docker=lambda caps: {"cap_drop": list(caps)} if caps else {},
        docker_text="`cap_drop` (`docker run --cap-drop`)",
        kubernetes="`securityContext.capabilities.drop`",
        pod=lambda parts, caps: parts.security.setdefault("capabilities", {}).update(drop=list(caps)),
        from_pod=lambda parts: None if (d := parts.security.get("capabilities", {}).get("drop")) is None else tuple(d),
        describe=lambda caps: [f"cap-drop {','.join(caps)}"] if caps else [],
        schema={
            "type": ["array", "null"],
            "items": {"type": "string"},
            "description": "Linux capabilities dropped, as Kubernetes names them (ALL, NET_RAW); null: none.",
        },
    ),
    Row(
        condition=Condition.NO_NEW_PRIVILEGES,
        shape=Shape.SWITCH,
        parse=parse_bool,
        flag="--no-new-privileges",
        flag_off="--allow-new-privileges",
        help="Forbid privilege escalation (setuid, file capabilities) or not.",
        docker=lambda on: {"security_opt": ["no-new-privileges:true"]} if on else {},
        docker_text='`security_opt=["no-new-privileges:true"]`',
        kubernetes="`securityContext.allowPrivilegeEscalation: false`",
        pod=lambda parts, on: parts.security.update(allowPrivilegeEscalation=not on),
        from_pod=lambda parts: parts.security.get("allowPrivilegeEscalation") is False or None,
        describe=lambda on: ["no-new-privileges"] if on else [],
        schema={
            "type": "boolean",
            "description": "No privilege escalation (docker run --security-opt "
            "no-new-privileges; Kubernetes allowPrivilegeEscalation: false).",
        },
    ),
    Row(
        condition=Condition.SECCOMP,
        shape=Shape.SCALAR,
        parse=parse_seccomp,
        flag="--seccomp",
        metavar="TYPE",
        help="Seccomp profile: RuntimeDefault (the engine's default profile) or Unconfined.",
        docker=lambda v: {"security_opt": ["seccomp=unconfined"]} if v == "Unconfined" else {},
        docker_text="`RuntimeDefault`: nothing (Docker applies its default profile to every container it does not "
        'run privileged); `Unconfined`: `security_opt=["seccomp=unconfined"]`',
        kubernetes="`securityContext.seccompProfile.type` (a pod without it runs Unconfined unless the kubelet "
        "sets `seccompDefault`)",
        pod=lambda parts, v: parts.pod_security.update(seccompProfile={"type": v}),
        from_pod=lambda parts: parts.pod_security.get("seccompProfile", {}).get("type"),
        describe=lambda v: [f"seccomp {v}"],
        schema=_nullable(
            "string",
            "Seccomp profile type as Kubernetes names it; null: the engine's default.",
            enum=[*SECCOMP_TYPES, None],
        ),
    ),
    Row(
        condition=Condition.PIDS_LIMIT,
        shape=Shape.SCALAR,
        parse=parse_pids,
        flag="--pids-limit",
        metavar="N",
        help="Most processes and threads the container may have, e.g. 1024.",
        docker=lambda v: {"pids_limit": v},
        docker_text="`pids_limit` (`docker run --pids-limit`)",
        kubernetes="no Pod field: the kubelet's `podPidsLimit` (KubeletConfiguration) bounds every pod of the node",
        pod=lambda parts, v: parts.annotations.update({kpod.PIDS_ANNOTATION: str(v)}),
        from_pod=kpod.read_pids,
        describe=lambda v: [f"pids {v}"],
        schema=_nullable("integer", "Most processes and threads of the container (pids cgroup); null: none."),
    ),
    Row(
        condition=Condition.NOFILE,
        shape=Shape.SCALAR,
        parse=parse_nofile,
        flag="--nofile",
        metavar="N",
        help="Open-files limit (soft and hard RLIMIT_NOFILE), e.g. 1024.",
        docker=lambda v: {"ulimits": [{"name": "nofile", "soft": v, "hard": v}]},
        docker_text="`ulimits` (`docker run --ulimit nofile=N:N`)",
        kubernetes="no Pod field: the container runtime's default (containerd `LimitNOFILE`, CRI-O `default_ulimits`)",
        pod=lambda parts, v: parts.annotations.update({kpod.NOFILE_LIMIT_ANNOTATION: str(v)}),
        from_pod=kpod.read_nofile,
        describe=lambda v: [f"nofile {v}"],
        schema=_nullable("integer", "Open-files limit (RLIMIT_NOFILE, soft and hard); null: the engine's."),
    ),
    Row(
        condition=Condition.ENV,
        shape=Shape.MAPPING,
        parse=parse_env_value,
        parse_key=parse_env_key,
        split=split_env,
        flag="--env",
        metavar="KEY=VALUE",
        help="Extra environment variable KEY=VALUE (repeatable).",
        docker=lambda m: {"environment": dict(m)} if m else {},
        docker_text="`environment` (`docker run --env`)",
        kubernetes="`env` of the container (`name`, `value`)",
        pod=lambda parts, m: parts.env.extend({"name": k, "value": str(v)} for k, v in m.items()),
        from_pod=lambda parts: {e["name"]: e["value"] for e in parts.env} or None,
        describe=lambda m: [f"{k}={v}" for k, v in m.items()],
        schema={**_STRING_MAP, "description": "Extra environment variables; null removes an inherited one."},
    ),
)
ROW: Mapping[Condition, Row] = {row.condition: row for row in ROWS}


def profile_schema_properties() -> dict[str, Any]:
    """The JSON Schema of a profile's keys, one per row: ``matrix.schema.json``'s ``$defs.profile.properties``
    (``tools/docs_tables.py`` writes it there)."""
    return {row.key: dict(row.schema) for row in ROWS}


def parse_value(row: Row, value: Any) -> Any:
    """``value`` of ``row``'s condition (not null) in its normal form: a dict for a mapping, a tuple for a list.

    Raises ValueError naming the entry (``/proc: ...``, ``item 2 ...``) and what to write.
    """
    if row.shape is Shape.MAPPING:
        if not isinstance(value, Mapping):
            raise ValueError("write a mapping")
        out: dict[str, str] = {}
        problems = []
        for k, v in value.items():
            try:
                key = _entry(row.parse_key, k, f"key {k!r}")
                if v is not None:
                    out[key] = _entry(row.parse, v, f"{k}: {v!r}")
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("; ".join(problems))
        return out
    if row.shape is Shape.LIST:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ValueError("write a list, e.g. [ALL]")
        return tuple(dict.fromkeys(_entry(row.parse, v, f"{v!r}") for v in value))
    return row.parse(value)


def _entry(parse: Callable[[Any], Any], value: Any, what: str) -> Any:
    try:
        return parse(value)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def docker_kwargs(values: Mapping[Condition, Any]) -> dict[str, Any]:
    """``containers.run`` kwargs for condition values in normal form (lists under one key, e.g. ``security_opt``,
    joined in table order)."""
    out: dict[str, Any] = {}
    for row in ROWS:
        if row.condition in values:
            for key, setting in row.docker(values[row.condition]).items():
                out[key] = [*out[key], *setting] if isinstance(setting, list) and key in out else setting
    return out


def markdown_table(affects: Mapping[Condition, Sequence[str]] | None = None) -> str:
    """The table as markdown: condition | matrix key | flag | Docker | Kubernetes (| affects: the checks that
    declare the condition can change their verdict, when ``affects`` is given)."""
    head = "| condition | matrix key | flag | Docker | Kubernetes |" + (" affects |" if affects is not None else "")
    rows = [head, "|" + "---|" * (6 if affects is not None else 5)]
    for row in ROWS:
        flag = f"`{row.flag}" + (f" {row.metavar}`" if row.metavar else "`")
        flag += f" / `{row.flag_off}`" if row.flag_off else ""
        line = f"| {row.key.replace('_', ' ')} | `{row.key}` | {flag} | {row.docker_text} | {row.kubernetes} |"
        if affects is not None:
            line += " " + (", ".join(f"`{c}`" for c in affects.get(row.condition, ())) or "—") + " |"
        rows.append(line)
    return "\n".join(rows) + "\n"
