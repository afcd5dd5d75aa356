"""The conditions a pod or container sets, as the kernel shows them from inside: cgroup memory and CPU limits,
/dev/shm, capabilities, no_new_privs, seccomp, the pids limit, and whether ``pidfd_getfd`` is allowed.

Standard library only, Python >= 3.9."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Tuple


# --- cgroup limits (classes 12 and 13) ---------------------------------------------------------------
def cgroup_value(v2_name: str, v1_controller: Any, v1_name: str) -> Any:
    """(text, path) of a cgroup file of this container: cgroup v2 ``/sys/fs/cgroup/<v2_name>`` or v1
    ``/sys/fs/cgroup/<controller>/<v1_name>``, also under this process's own cgroup path (/proc/self/cgroup) where
    the host's cgroup tree is mounted (cgroupns=host). (None, None) when none is readable."""
    candidates = [f"/sys/fs/cgroup/{v2_name}", f"/sys/fs/cgroup/{v1_controller}/{v1_name}"]
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.strip().split(":", 2)
                if controllers == "":
                    candidates.append(f"/sys/fs/cgroup{path}/{v2_name}")
                elif v1_controller in controllers.split(","):
                    candidates.append(f"/sys/fs/cgroup/{v1_controller}{path}/{v1_name}")
    except (OSError, ValueError):
        pass
    for path in candidates:
        try:
            with open(path) as f:
                return f.read().strip(), path
        except OSError:
            continue
    return None, None


def pod_conditions() -> Any:
    """The conditions a pod sets as the kernel shows them: /dev/shm's size in bytes, the capability bounding set
    (hex, /proc/self/status CapBnd), no_new_privs, the seccomp mode, the pids limit (None: none or unreadable)."""
    out: Dict[str, Any] = {}
    try:
        st = os.statvfs("/dev/shm")
        out["shm_bytes"] = st.f_frsize * st.f_blocks
    except OSError:
        out["shm_bytes"] = None
    status = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                status[key] = value.strip()
    except OSError:
        pass
    out["capabilities_bounding"] = status.get("CapBnd")
    out["no_new_privs"] = {"0": False, "1": True}.get(status.get("NoNewPrivs", ""))
    out["seccomp_mode"] = {"0": "disabled", "1": "strict", "2": "filter"}.get(status.get("Seccomp", ""))
    text, _ = cgroup_value("pids.max", "pids", "pids.max")
    out["pids_max"] = int(text) if text is not None and text.isdigit() else None
    return out


def host_memory_bytes() -> Any:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return None


def memory_limit_bytes() -> Any:
    """(bytes, source): the container's memory limit from its cgroup (v2 memory.max, v1 memory.limit_in_bytes);
    without a limit, the host's RAM from /proc/meminfo (source names which)."""
    value, path = cgroup_value("memory.max", "memory", "memory.limit_in_bytes")
    host = host_memory_bytes()
    if value is not None and value.isdigit() and (host is None or int(value) < host):
        return int(value), f"cgroup {path}"
    if host is not None:
        return host, "/proc/meminfo MemTotal (no cgroup memory limit)"
    return None, None


def cpu_quota() -> Any:
    """(CPUs, source): the CPU quota of this container's cgroup (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us),
    or (None, None) without one."""
    value, path = cgroup_value("cpu.max", "cpu", "cpu.cfs_quota_us")
    if value is None:
        return None, None
    if path.endswith("cpu.max"):
        quota, _, period = value.partition(" ")
        if quota == "max" or not period:
            return None, None
        return int(quota) / int(period), f"cgroup {path}"
    if int(value) <= 0:
        return None, None
    period, _ = cgroup_value("cpu.max", "cpu", "cpu.cfs_period_us")
    return int(value) / int(period or 100000), f"cgroup {path}"


# pidfd_getfd(2): the same number on every Linux architecture (the unified syscall table, Linux >= 5.6).
SYS_PIDFD_GETFD = 438


PIDFD_ADVICE = (
    "a pod needs securityContext.capabilities.add: [SYS_PTRACE] (docker run --cap-add SYS_PTRACE): Docker's and "
    "containerd's default seccomp profiles allow pidfd_getfd only with CAP_SYS_PTRACE, and Pod Security "
    "'baseline' and 'restricted' both forbid adding it: run multi-GPU pods in a namespace labelled 'privileged' "
    "(or exempted), with that one capability added"
)


def pidfd_getfd_probe() -> Any:
    """(allowed, error): whether this process may take a file descriptor of a child of its own with pidfd_getfd
    (how GPU workers pass memory handles: flashinfer#2394), by trying it on ``python -c`` child's stdin. allowed
    None where it cannot be tried (no os.pidfd_open, no libc), error the errno name and text when refused."""
    import ctypes.util

    if not hasattr(os, "pidfd_open"):
        return None, "os.pidfd_open is missing (Python < 3.9 or not Linux)"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError as exc:
        return None, f"no C library to call pidfd_getfd with: {exc}"
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    pidfd = None
    try:
        pidfd = os.pidfd_open(child.pid)
        fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, 0, 0)
        if fd >= 0:
            os.close(fd)
            return True, None
        code = ctypes.get_errno()
        return False, f"{errno.errorcode.get(code, code)}: {os.strerror(code)}"
    except OSError as exc:
        return False, f"{errno.errorcode.get(exc.errno or 0, exc.errno)}: {exc.strerror}"
    finally:
        if pidfd is not None:
            os.close(pidfd)
        child.kill()
        child.wait()


def mount_table() -> List[Any]:
    """[(mount point, options)] from /proc/self/mountinfo, the longest mount point first."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            out.append((fields[4].replace("\\040", " "), set(fields[5].split(","))))
    return sorted(out, key=lambda m: len(m[0]), reverse=True)


def mount_of(path: str, mounts: Any) -> Any:
    path = os.path.abspath(path)
    for point, options in mounts:
        if path == point or path.startswith(point.rstrip("/") + "/"):
            return point, options
    return "/", set()


def writable(path: str) -> Optional[str]:
    """None when a file can be written in ``path`` (made if missing), else the error."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def unsearchable_path_entries(path_value: str) -> List[Dict[str, Any]]:
    """The entries of ``path_value`` (a ``PATH``) this process cannot search: the entry itself or a folder above it
    lacks the search (x) permission for this UID and its groups, so every program behind it is invisible to
    ``shutil.which`` and an ``exec`` through PATH fails with ``PermissionError`` (``[Errno 13] Permission denied:
    'gcc'``) where nothing later on PATH has it. Each as {entry, blocker, uid, gid, mode: '700'}; an entry that does
    not exist, or a relative one, is left out."""
    found = []
    for entry in dict.fromkeys(path_value.split(os.pathsep)):
        if not entry.startswith("/"):
            continue
        probe = "/"
        for part in [p for p in entry.split("/") if p]:
            probe = os.path.join(probe, part)
            try:
                st = os.stat(probe)
            except OSError:
                break  # absent (the folder above was searchable: its entries could be looked up)
            if stat.S_ISDIR(st.st_mode) and not os.access(probe, os.X_OK):
                mode = format(st.st_mode & 0o7777, "o")
                found.append({"entry": entry, "blocker": probe, "uid": st.st_uid, "gid": st.st_gid, "mode": mode})
                break
    return found


def path_problem(blocked: List[Dict[str, Any]], uid: int, gid: int) -> Tuple[str, str, Optional[str]]:
    """run-conditions' (condition, diagnosis, fix) for the PATH entries ``blocked`` (``unsearchable_path_entries``)
    of UID ``uid`` GID ``gid``: a folder the image made for root only (``mkdir -m 700``, a tool unpacked with its
    archive's modes) hides its programs, and a compiler there fails with ``PermissionError`` only when something
    compiles (inductor, Triton)."""
    shown = "; ".join(
        b["entry"]
        + (f" (its folder {b['blocker']} " if b["blocker"] != b["entry"] else " (")
        + f"owned by {b['uid']}:{b['gid']}, mode {b['mode']})"
        for b in blocked
    )
    return (
        "PATH not searchable",
        f"UID {uid} GID {gid} cannot search the PATH entr{'y' if len(blocked) == 1 else 'ies'} {shown}: the programs "
        "there are not found, and running one through PATH fails with PermissionError",
        "make the folders searchable by every user in the image (RUN chmod a+rx "
        + " ".join(dict.fromkeys(b["blocker"] for b in blocked))
        + "), or take the entry off PATH",
    )


def blocker(path: str) -> Dict[str, Any]:
    """The folder that keeps ``path`` from being made or written: the path itself where it exists, else its
    deepest existing parent, with owner and mode ({blocker, uid, gid, mode: '755'}); blocker None if none stats."""
    probe = os.path.abspath(path)
    while True:
        try:
            st = os.stat(probe)
        except OSError:
            parent = os.path.dirname(probe)
            if parent == probe:
                return {"blocker": None, "uid": None, "gid": None, "mode": None}
            probe = parent
            continue
        return {"blocker": probe, "uid": st.st_uid, "gid": st.st_gid, "mode": format(st.st_mode & 0o7777, "o")}
