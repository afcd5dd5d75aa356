"""End of life beyond a clean stop, on the serve check's first server in the full suite: killed with SIGKILL once
probed (``kill``), as the OOM killer or a liveness kill ends it, with what is left of its processes and of /dev/shm
afterwards; then restarted in the same pod: a fresh container on the same /dev/shm and compile cache volumes, which
must come up (it is the warm start, ``serve_run._restart``), or the leftovers are named as its cause.

A pod's /dev/shm is an ``emptyDir: {medium: Memory}``: it belongs to the pod, not the container, so it outlives a
container restart. Here it is a tmpfs Docker volume (``shm_volume``, the profile's ``shm_size``) mounted at
/dev/shm, held by a pod container (``pod_spec``: ``sleep infinity``, as the pod's sandbox holds its volumes; the
engine unmounts a tmpfs volume once no container uses it) for as long as the server and its restart live; the
state of /dev/shm is read in it (``read_shm``: ``servediag.READ_SHM``).

Which process is killed: vLLM's API server, the process a pod's OOM kill or liveness kill ends. The serve check's
stop contract requires it to be PID 1; then the SIGKILL comes from outside the container (``docker kill``: PID 1
ignores SIGKILL sent from its own PID namespace), and the kernel ends every process of the namespace with it, as
in a pod. Where it is not PID 1 (a shell or a supervisor in front of it), it is killed inside the container (as
the OOM killer picks one process) and its engine core and workers may survive (vllm#55510): they are named, with
their memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

import docker
import docker.errors

from matrixtool.core.container import ContainerSpec, TrackedContainer
from matrixtool.incontainer.vllm_smoke import servediag
from matrixtool.model.conditions import Condition
from matrixtool.model.profiles import Profile
from matrixtool.smoke.serve import diagnosis as serve_diagnosis
from matrixtool.smoke.serve import line as serve_line

# docs/failure-classes.md numbers.
SURVIVORS = 42  # processes of a killed server left alive, holding memory
SHM_LEFTOVERS = servediag.SHM_LEFTOVERS  # 43: a killed server's /dev/shm segments fail (or burden) the restart
RESTART = 45  # the restart in the same pod does not come up, for a cause other than leftovers
DOCKER_SHM = "64m"  # Docker's /dev/shm when a profile sets none
KILL_WAIT_S = 20.0
# The /dev/shm volume's mount: ``nocopy``, else the engine copies the image's /dev/shm folder (root, mode 0755) onto
# the empty volume at its first mount, and no other UID can make a segment there (seen on the CPU image).
SHM_MOUNT = {"bind": "/dev/shm", "mode": "rw,nocopy"}
# The hint where the restart was still starting when the check's time ran out (no class: nothing shows a fault).
RESTART_TIME_HINT = (
    "the restart had what was left of the serve check's timeout (at least 60 s) and was still starting, with no "
    "error, when it ran out: its log names no fault (a slow or loaded machine is the usual reason): raise the "
    "variant's timeouts.serve or timeout_scale in matrix.yaml, and compare the restart's phases with the cold start's"
)
# Class 45's fix where the restart's log names a cause no diagnosis knows (a stale lock or pid file, a port).
RESTART_HINT = (
    "the first start came up and the restart, on the same volumes, did not: what the killed server left there (a lock "
    "or pid file of a dead process on the cache volume, a file in /dev/shm) or held is the cause quoted; have the "
    "server's start clear its own stale state, or keep such files off the volumes that outlive the container"
)
# The processes of a container as its user sees them (``python3 -c PROCESSES``; itself left out): one JSON list of
# {pid, ppid, rss_kib, cmd}.
PROCESSES = (
    "import json, os\n"
    "out = []\n"
    "for p in sorted((int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid())):\n"
    "    try:\n"
    "        cmd = open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' ').decode(errors='replace').strip()\n"
    "        st = dict(l.split(':', 1) for l in open(f'/proc/{p}/status') if ':' in l)\n"
    "    except OSError:\n"
    "        continue\n"
    "    rss = int(st.get('VmRSS', '0 kB').split()[0])\n"
    "    out.append({'pid': p, 'ppid': int(st['PPid']), 'rss_kib': rss, 'cmd': cmd[:160] or st['Name'].strip()})\n"
    "print(json.dumps(out))\n"
)


def shm_size(profile: Profile) -> str:
    """The profile's /dev/shm size in Docker's units (``shm_size``; Docker's 64m where it sets none)."""
    value = profile.value(Condition.SHM_SIZE)
    return str(value) if value else DOCKER_SHM


@contextlib.contextmanager
def shm_volume(client: docker.DockerClient, labels: Mapping[str, str], size: str) -> Iterator[str]:
    """A fresh tmpfs Docker volume ``vllm-matrix-shm-<random>`` of ``size`` (mode 1777: any UID of any profile
    writes it), the pod's /dev/shm; removed on the way out as the model's volume (``serve_line.fresh_volume``)."""
    opts = {"type": "tmpfs", "device": "tmpfs", "o": f"size={size},mode=1777"}
    with serve_line.fresh_volume(client, "shm", labels, opts) as name:
        yield name


def pod_spec(image: str, profile: Profile, volume: str) -> ContainerSpec:
    """The pod's holder of /dev/shm: ``sleep infinity`` in the image, as the profile's user, no network, a read-only
    root, ``volume`` at /dev/shm (the state of /dev/shm is read in it)."""
    return ContainerSpec(
        image=image,
        entrypoint=["sleep"],
        command=["infinity"],
        network_mode="none",
        user=profile.user,
        read_only=True,
        volumes={volume: SHM_MOUNT},
        extra={"healthcheck": {"test": ["NONE"]}},
    )


def with_shm(spec: ContainerSpec, volume: str) -> ContainerSpec:
    """``spec`` with ``volume`` as its /dev/shm (the engine mounts no /dev/shm of its own over a mount there)."""
    return dataclasses.replace(spec, volumes={**spec.volumes, volume: SHM_MOUNT})


def _json(box: TrackedContainer, argv: list[str]) -> Any:
    """The JSON that ``argv`` prints in ``box``; None where it cannot run or prints none."""
    try:
        code, out = box.exec(argv, {}, 60.0)
    except docker.errors.DockerException:
        return None
    if code != 0:
        return None
    with contextlib.suppress(ValueError):
        return json.loads(out.strip().splitlines()[-1])
    return None


def read_shm(pod: TrackedContainer) -> dict[str, Any]:
    """/dev/shm's state in ``pod`` (``servediag.read_shm``'s keys), or {"error": ...} where it cannot be read."""
    got = _json(pod, ["python3", "-c", servediag.READ_SHM, "/dev/shm"])
    return dict(got) if isinstance(got, dict) else {"error": "/dev/shm could not be read in the pod's container"}


def processes(box: TrackedContainer) -> list[dict[str, Any]]:
    """The processes of ``box`` (``PROCESSES``); [] where it does not run."""
    got = _json(box, ["python3", "-c", PROCESSES])
    return list(got) if isinstance(got, list) else []


SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "busybox"})


def api_server(procs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """vLLM's API server among ``procs``: PID 1 when it runs ``... serve ...``, else the first process that does;
    never a shell that runs it (``sh -c 'vllm serve ...'``: its command line holds the words too), nor an engine core
    or worker (titled ``VLLM::...``)."""

    def serves(p: dict[str, Any]) -> bool:
        words = str(p["cmd"]).split()
        return (
            bool(words)
            and " serve" in f" {p['cmd']}"
            and not words[0].startswith("VLLM::")
            and (words[0].rsplit("/", 1)[-1] not in SHELLS)
        )

    serving = [p for p in procs if serves(p)]
    return next((p for p in serving if p["pid"] == 1), None) or next(iter(serving), None)


def kill(server: TrackedContainer) -> dict[str, Any]:
    """SIGKILL to the ready ``server``'s API server (see the module docstring for which process and how), then
    what is left: ``target`` (pid, command), ``tree`` (its processes before, ``PROCESSES``), ``exit_code`` (None:
    the container still runs), ``survivors`` (the processes left, with their memory), ``seconds`` (the step's wall
    time: listing, kill, wait, listing again). Raises docker errors of the
    kill itself."""
    assert server.container is not None
    began = time.monotonic()
    tree = processes(server)
    target = api_server(tree)
    if target is None or target["pid"] == 1:
        server.container.kill(signal="SIGKILL")
    else:
        server.exec(["python3", "-c", f"import os; os.kill({int(target['pid'])}, 9)"], {}, 30.0)
    code = server.wait(KILL_WAIT_S)
    survivors = processes(server) if code is None else []
    return {
        "target": target or {"pid": 1, "cmd": "unknown"},
        "tree": tree,
        "exit_code": code,
        "survivors": survivors,
        "survivors_rss_kib": sum(int(p.get("rss_kib") or 0) for p in survivors),
        "seconds": round(time.monotonic() - began, 1),
    }


@contextlib.contextmanager
def pod(
    client: docker.DockerClient, image: str, profile: Profile, session: str, labels: Mapping[str, str]
) -> Iterator[tuple[str, TrackedContainer]]:
    """The pod of the full suite's server and its restart: its /dev/shm volume (``shm_volume``) and the container
    that holds it (``pod_spec``), started; both removed on the way out."""
    with contextlib.ExitStack() as stack:
        volume = stack.enter_context(shm_volume(client, labels, shm_size(profile)))
        box = stack.enter_context(TrackedContainer(client, pod_spec(image, profile, volume), session=session))
        yield volume, box


def _still_starting(restart: Mapping[str, Any]) -> str:
    """The words for a restart that neither came up nor exited in the ``waited_s`` seconds it had: how far vLLM's
    start got (its last phase logged)."""
    waited = restart.get("waited_s")
    phases = dict(restart.get("phases") or {})
    # ``waited_s``: what was left of the check's timeout, at least 60 s (``serve_run._restart``), so not "left".
    within = f" within the {float(waited):.0f} s it had" if waited is not None else " in time"
    last = next(reversed(phases), None)
    reached = (
        f"; its start had reached {last!r} at {phases[last]} s" if last else "; vLLM had logged no phase of its start"
    )
    return f"was still starting, not ready{within}{reached}"


def judge(warm: Mapping[str, Any], env: Mapping[str, str] | None) -> tuple[list[str], list[str], dict[str, Any], str]:
    """(problems, hints, facts, summary words) of the kill and the restart that ``warm`` holds: ``kill`` and
    ``shm_after_kill`` of the first server, then the warm start's own keys (``serve_run._restart``: ``ready_s``,
    ``exit_code``, ``log``, ``shm``, or ``error``), as the restart in the same pod. Survivors of the SIGKILL fail
    (class 42), with their memory; a restart that does not come up fails with its diagnosis read with /dev/shm's
    state (class 43 where the leftovers take the room, else its log's cause, class 45), one still starting when the
    check's time ran out fails as that, with no class (nothing shows stale state); a restart that came up with
    leftovers in /dev/shm passes with them named (their memory counts against the pod's). Pure."""
    problems: list[str] = []
    hints: list[str] = []
    facts: dict[str, Any] = {}
    killed = warm.get("kill")
    restart = warm if ("ready_s" in warm or "error" in warm) else None
    if not killed:
        return problems, hints, facts, ""
    shm = dict(warm.get("shm_after_kill") or {})
    facts["kill"] = {k: killed.get(k) for k in ("target", "exit_code", "survivors", "survivors_rss_kib", "seconds")}
    facts["kill"]["shm"] = shm
    if killed.get("error"):
        problems.append(f"the server could not be killed: {killed['error']}")
        return problems, hints, facts, ""
    survivors = killed.get("survivors") or []
    target = killed.get("target") or {}
    if survivors:
        facts["failure_class"] = SURVIVORS
        named = ", ".join(
            f"{p['pid']} {p['cmd'][:50]} ({int(p.get('rss_kib') or 0) / 1024:.0f} MiB)" for p in survivors[:4]
        )
        problems.append(
            f"SIGKILL to vLLM's API server (pid {target.get('pid')}, {str(target.get('cmd'))[:60]}) left "
            f"{len(survivors)} process(es) alive holding {int(killed.get('survivors_rss_kib') or 0) / 1024:.0f} MiB: "
            f"{named} ("
            + (
                "vllm#55510: its engine core and workers outlive it where it is not PID 1)"
                if any(str(p.get("cmd", "")).startswith("VLLM::") for p in survivors)
                else "no vLLM process among them: PID 1 keeps the container up with the server dead, so the "
                "kubelet never restarts it)"
            )
        )
        hints.append(
            "make vLLM's API server PID 1 (ENTRYPOINT in exec form, `exec vllm serve` in a script): then its death "
            "ends the container, and the kubelet restarts it; a supervisor in front of it keeps its orphans alive"
        )
    left = servediag.shm_leftovers(shm)
    words = f"; SIGKILL once probed: {'nothing' if not survivors else len(survivors)} left"
    words += f", /dev/shm kept {left}" if left else ", /dev/shm empty"
    if not restart:
        return problems, hints, facts, words
    facts["restart"] = {k: restart.get(k) for k in ("ready_s", "exit_code", "shm", "waited_s")}
    if restart.get("error"):
        ready = restart.get("ready_s")
        what = "could not run" if ready is None else f"was ready in {float(ready):.0f} s, then its stop failed"
        problems.append(f"the restart in the same pod {what}: {restart['error']}")
    elif restart.get("ready_s") is None and restart.get("exit_code") is None:
        problems.append(
            f"the restart in the same pod (after SIGKILL, on its /dev/shm and cache) {_still_starting(restart)}"
        )
        hints.append(RESTART_TIME_HINT)
    elif restart.get("ready_s") is None:
        code, log = restart.get("exit_code"), str(restart.get("log") or "")
        found = serve_diagnosis.diagnose_log(log, code, env=env, shm=restart.get("shm") or shm)
        if found is not None and found.failure_class == SHM_LEFTOVERS:
            facts["failure_class"] = SHM_LEFTOVERS
            problems.append(f"the restart in the same pod exited ({code}): {found.diagnosis}: {found.cause}")
            hints.append(found.fix)
        else:
            known = found is not None and found.failure_class is not None  # a class of its own, with its fix
            facts.setdefault("failure_class", found.failure_class if found is not None and known else RESTART)
            if found is not None and known:
                cause = found.render()
            else:  # vLLM's generic "server exited" says no more than the cause line: quote it, with class 45's fix
                cause = repr(serve_diagnosis.root_exception(log) or (found.cause if found else "no cause logged"))
            problems.append(
                f"the restart in the same pod (after SIGKILL, on its /dev/shm and cache) exited ({code}): {cause}"
            )
            hints.append(found.fix if found is not None and known else RESTART_HINT)
    else:
        words += ", then restarted in the same pod"
    return problems, hints, facts, words
