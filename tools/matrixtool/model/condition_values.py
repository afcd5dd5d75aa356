"""The value rules of the run conditions: each returns the normal form or raises ``ValueError`` saying what to
write instead. The bounds are the kernel's, the Engine API's and Kubernetes'; each constant says whose."""

from __future__ import annotations

import difflib
import math
import re
from typing import Any

# (uid_t)-1 = 4294967295 means "leave unchanged" to setresuid(2), so the largest usable ID is 2^32 - 2.
MAX_ID = 2**32 - 2
# The largest CPU count a Linux kernel can be built for (x86-64 CONFIG_NR_CPUS with MAXSMP: 8192). A quota
# above it is more than any machine has. The quota is not bounded by this machine's cores: matrix.yaml is
# read on many machines; the engine refuses a quota above the host's at container start.
MAX_CPUS = 8192
# Docker refuses a quota below 0.01 CPUs; Kubernetes counts CPUs in millicores, so a quota is a multiple of 0.001.
MIN_CPUS = 0.01
# PID_MAX_LIMIT of 64-bit Linux (2^22): no pids limit above it can ever bind.
MAX_PIDS = 2**22
MAX_NOFILE = 2**20
# Sizes go to the Engine API as int64 bytes; Docker refuses a memory limit below 6 MB.
MAX_BYTES = 2**63 - 1
MIN_MEMORY = 6 * 2**20
_DOCKER_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}
SIZE = re.compile(r"([0-9]{1,20})([bkmgBKMG]?)")
_ID = re.compile(r"([0-9]{1,10})(?::([0-9]{1,10}))?")
_PATH_PART = re.compile(r"[A-Za-z0-9._@+-]+")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NETWORK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")
# Mount points the engine and the kernel own: a tmpfs there hides the container's root, procfs, sysfs or devices.
_KERNEL_MOUNTS = ("/proc", "/sys", "/dev")
# tmpfs(5) and mount(8) options Docker passes through for a tmpfs; each flag with its opposite.
_TMPFS_FLAGS = {
    "rw": "ro",
    "exec": "noexec",
    "suid": "nosuid",
    "dev": "nodev",
    "atime": "noatime",
    "diratime": "nodiratime",
    "sync": "async",
    "tmpcopyup": "notmpcopyup",
}
_TMPFS_FLAGS.update({v: k for k, v in list(_TMPFS_FLAGS.items())})
_TMPFS_FLAGS.update({"relatime": "", "strictatime": ""})
_TMPFS_VALUES = {
    "size": re.compile(r"[0-9]{1,20}[kmgKMG]?|[0-9]{1,3}%"),
    "nr_inodes": re.compile(r"[0-9]{1,20}[kmgKMG]?"),
    "mode": re.compile(r"[0-7]{3,4}"),
    "uid": re.compile(r"[0-9]{1,10}"),
    "gid": re.compile(r"[0-9]{1,10}"),
}
# Linux capabilities (include/uapi/linux/capability.h, CAP_CHOWN .. CAP_CHECKPOINT_RESTORE), as Kubernetes and
# `docker run --cap-drop` name them (without CAP_), and ALL.
CAPABILITIES = (
    "ALL",
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
)
# Kubernetes' seccompProfile types this tool can put in place with Docker (Localhost needs a file on the node).
SECCOMP_TYPES = ("RuntimeDefault", "Unconfined")


def text_value(value: Any, example: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"write a string, e.g. {example}")
    if not value.isprintable():
        raise ValueError("holds a control character; write one line of printable text")
    return value


def parse_any_key(value: Any) -> str:
    """A mapping's key as text (the default ``Row.parse_key``)."""
    return text_value(value, '"KEY"')


def parse_user(value: Any) -> str:
    """``UID[:GID]`` as decimal numbers, each at most ``MAX_ID`` (Kubernetes runAsUser/runAsGroup are integers)."""
    text = text_value(value, '"1000770000:0"')
    match = _ID.fullmatch(text)
    if match is None or any(int(n) > MAX_ID for n in match.groups() if n is not None):
        raise ValueError(f'write UID[:GID] as numbers from 0 to {MAX_ID}, e.g. "1000770000:0"')
    return text


def parse_size_bytes(value: Any, *, minimum: int = 1, minimum_text: str = "1b") -> int:
    """Bytes of a size in Docker's units (``4g``: digits and an optional ``b``, ``k``, ``m`` or ``g``, binary).

    Raises ValueError unless it is between ``minimum`` and ``MAX_BYTES``.
    """
    text = text_value(value, '"4g"')
    match = SIZE.fullmatch(text)
    if match is None:
        raise ValueError('write digits and a unit b, k, m or g (binary, as Docker reads them), e.g. "4g" or "512m"')
    size = int(match.group(1)) * _DOCKER_UNITS[match.group(2).lower()]
    if not minimum <= size <= MAX_BYTES:
        raise ValueError(f'write a size from {minimum_text} to 2^63 - 1 bytes (the Engine API\'s int64), e.g. "4g"')
    return size


def parse_memory(value: Any) -> str:
    parse_size_bytes(value, minimum=MIN_MEMORY, minimum_text="6m (Docker's minimum)")
    return str(value).lower()


def parse_shm(value: Any) -> str:
    parse_size_bytes(value)
    return str(value).lower()


def parse_cpus(value: Any) -> float:
    """A CPU quota: a finite number from ``MIN_CPUS`` to ``MAX_CPUS``, in steps of 0.001 (millicores)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError("write a number of CPUs, e.g. 1.5") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("write a number of CPUs, e.g. 1.5")
    number = float(value)
    if not math.isfinite(number) or not MIN_CPUS <= number <= MAX_CPUS:
        raise ValueError(
            f"write a number from {MIN_CPUS} to {MAX_CPUS} (the most CPUs a Linux kernel supports), e.g. 1.5"
        )
    if abs(number * 1000 - round(number * 1000)) > 1e-6:
        raise ValueError("write at most three decimals (Kubernetes counts CPUs in millicores), e.g. 1.5")
    return number


def parse_network(value: Any) -> str:
    """A Docker network mode: ``none``, ``bridge``, ``host``, ``container:NAME`` or a network name."""
    text = text_value(value, '"none"')
    name = text.removeprefix("container:")
    if not _NETWORK_NAME.fullmatch(name):
        raise ValueError(
            "write none, bridge, host, container:NAME or a network name (letters, digits, '_', '.', '-', "
            "starting with a letter or digit)"
        )
    return text


def parse_mount_point(value: Any) -> str:
    """An absolute, normal mount point for a tmpfs that hides nothing the engine or the kernel owns."""
    text = text_value(value, '"/tmp"')
    parts = text.split("/")[1:]
    if not text.startswith("/") or text == "/":
        raise ValueError("write an absolute path other than / (a tmpfs over / hides the image), e.g. /tmp")
    if not all(_PATH_PART.fullmatch(p) and p not in (".", "..") for p in parts):
        raise ValueError(
            "write a normal absolute path (no '.', '..', '//', trailing '/'; letters, digits, '.', '_', '@', '+', "
            "'-'), e.g. /tmp"
        )
    if text == "/dev/shm":
        raise ValueError("/dev/shm is set by shm_size (--shm-size; Kubernetes: an emptyDir of medium Memory)")
    kernel = next((k for k in _KERNEL_MOUNTS if text == k or text.startswith(k + "/")), None)
    if kernel is not None:
        raise ValueError(f"{kernel} belongs to the engine and the kernel; mount the tmpfs elsewhere, e.g. /tmp")
    return text


def parse_tmpfs_options(value: Any) -> str:
    """Comma-separated tmpfs mount options (``rw,exec,size=4g,mode=1777``); empty: Docker's defaults (noexec)."""
    text = text_value(value, '"rw,exec,size=4g"')
    if text == "":
        return text
    seen: list[str] = []
    for option in text.split(","):
        key, sep, val = option.partition("=")
        if sep:
            pattern = _TMPFS_VALUES.get(key)
            ok = pattern is not None and pattern.fullmatch(val) is not None
            if ok and key in ("uid", "gid"):
                ok = int(val) <= MAX_ID
            elif ok and key in ("size", "nr_inodes") and not val.endswith("%"):
                # the kernel reads it as a 64-bit count (memparse): a larger one wraps around silently
                scale = 1024 ** "kmg".index(val[-1].lower()) * 1024 if val[-1].isalpha() else 1
                ok = int(val.rstrip("kmgKMG")) * scale <= MAX_BYTES
            if not ok:
                known = ", ".join(f"{k}=" for k in _TMPFS_VALUES)
                raise ValueError(
                    f"option {option!r} is not one of {known} with a valid value; e.g. size=4g, mode=1777, uid=0"
                )
        elif key not in _TMPFS_FLAGS:
            close = difflib.get_close_matches(key, list(_TMPFS_FLAGS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"option {option!r} is not a tmpfs option{hint} (write comma-separated options such as rw,exec,"
                "nosuid,nodev,size=4g,mode=1777)"
            )
        if key in seen or (_TMPFS_FLAGS.get(key) or "\0") in seen:
            raise ValueError(f"option {option!r} repeats or contradicts an earlier one; write each option once")
        seen.append(key)
    return text


def parse_env_key(value: Any) -> str:
    """An environment variable name: a letter or ``_``, then letters, digits, ``_`` (POSIX)."""
    text = text_value(value, '"HF_HUB_OFFLINE"')
    if not _ENV_KEY.fullmatch(text):
        raise ValueError("write a variable name (a letter or '_', then letters, digits or '_'), e.g. HF_HUB_OFFLINE")
    return text


def parse_env_value(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError('write a string, e.g. "1"')
    return text_value(str(value), '"1"')


def parse_capability(value: Any) -> str:
    """A Linux capability as Kubernetes names it (``NET_RAW``, without ``CAP_``), or ``ALL``."""
    text = text_value(value, '"ALL"')
    if text not in CAPABILITIES:
        upper = text.upper().removeprefix("CAP_")
        close = [upper] if upper in CAPABILITIES else difflib.get_close_matches(upper, CAPABILITIES, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"write ALL or a capability name as Kubernetes writes it (NET_RAW, SYS_ADMIN){hint}")
    return text


def parse_bool(value: Any) -> bool:
    """A YAML boolean (``true``/``false``); a flag passes click's boolean."""
    if not isinstance(value, bool):
        raise ValueError("write true or false")
    return value


def parse_seccomp(value: Any) -> str:
    """A seccomp profile type as Kubernetes names it: ``RuntimeDefault`` or ``Unconfined``."""
    text = text_value(value, '"RuntimeDefault"')
    if text not in SECCOMP_TYPES:
        raise ValueError(
            "write RuntimeDefault (the engine's default profile) or Unconfined; a Localhost profile is a file on "
            "the node, which this tool does not manage"
        )
    return text


def parse_pids(value: Any) -> int:
    """A pids limit: an integer from 1 to ``MAX_PIDS`` (processes and threads of the container's cgroup)."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,8}", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PIDS:
        raise ValueError(f"write a whole number from 1 to {MAX_PIDS} (Linux's PID_MAX_LIMIT), e.g. 1024")
    pids: int = value
    return pids


def parse_nofile(value: Any) -> int:
    """An open-files limit: an integer from 16 to ``MAX_NOFILE`` (soft and hard ``RLIMIT_NOFILE`` alike)."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,8}", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 16 <= value <= MAX_NOFILE:
        raise ValueError(f"write a whole number from 16 to {MAX_NOFILE} (Linux's default fs.nr_open), e.g. 65535")
    nofile: int = value
    return nofile


def split_tmpfs(value: str) -> tuple[str, str]:
    """A ``--tmpfs`` flag's ``PATH[:OPTS]`` -> (path, options)."""
    path, _, opts = value.partition(":")
    return path, opts


def split_env(value: str) -> tuple[str, str]:
    """An ``--env`` flag's ``KEY=VALUE`` -> (key, value). Raises ValueError without ``=``."""
    key, sep, val = value.partition("=")
    if not sep:
        raise ValueError("write KEY=VALUE, e.g. HF_HUB_OFFLINE=1")
    return key, val
