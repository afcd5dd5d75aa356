"""End of life beyond a clean stop (docs/failure-classes.md 42-45) with a real server of the CPU image, eager (no
compile) to keep it short: the serve check's warm path in a pod of ``serve.endoflife`` (ready, SIGKILL, /dev/shm
read, a restart in a fresh container on the same /dev/shm), with leftovers planted in /dev/shm before the restart;
images FROM the CPU image whose stop kills the engine first (class 44: the serve check's ``observe`` and ``judge``,
one eager server) and whose restart a stale pid file on the cache refuses (class 45: killed before ready, no
server start-up). The good image under the suite's profiles is judged by the session's run (test_serve.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest

from matrixtool.core.container import OWNER_LABEL, SESSION_LABEL, TrackedContainer, sweep
from matrixtool.model.conditions import Condition
from matrixtool.model.profiles import Profile
from matrixtool.smoke.result import Status
from matrixtool.smoke.serve import check as serve_check
from matrixtool.smoke.serve import diagnosis as sd
from matrixtool.smoke.serve import endoflife
from matrixtool.smoke.serve import line as serve_line
from matrixtool.smoke.serve import run as serve_run
from tests.integration.conftest import OWNER
from tests.integration.test_serve_classes import PROGRAMS, START_TIMEOUT, tiny_model  # noqa: F401 - the module's fixture

pytestmark = [pytest.mark.engine, pytest.mark.slow]

# Fills /dev/shm (argv[1]) but for argv[2] MiB with one file, as a dead server's segments would.
PLANT = (
    "import os, sys; st = os.statvfs('/dev/shm'); n = st.f_frsize * st.f_bavail - int(sys.argv[2]) * 2**20\n"
    "with open(sys.argv[1], 'wb') as f:\n"
    "    for _ in range(n // 2**20): f.write(bytes(2**20))\n"
)


def test_leftovers_planted_in_the_pods_shm_fail_the_restart_and_are_named(
    client: docker.DockerClient,
    cpu_image: str,
    tiny_model: Path,  # noqa: F811
) -> None:
    """Class 43 (and the kill's facts of a good image): the server is PID 1, so its SIGKILL leaves no process; its
    segments stay in the pod's /dev/shm; with /dev/shm then filled but for 50 MiB, the restart fails with
    "Insufficient space in /dev/shm" and the diagnosis names the files, not the size."""
    profile = Profile(name="pod", values={Condition.SHM_SIZE: "1g"})
    session = uuid.uuid4().hex[:12]
    labels = {OWNER_LABEL: OWNER, SESSION_LABEL: session}
    launch = serve_run.Launch(image=cpu_image, profile=profile, volume="", session=session, eager=True)
    spec = serve_line.server_spec(cpu_image, profile, "unused", eager=True)
    spec = dataclasses.replace(spec, volumes={str(tiny_model): {"bind": serve_line.MODEL_PATH, "mode": "ro"}})
    try:
        with endoflife.pod(client, cpu_image, profile, session, labels) as (shm, pod):
            spec = endoflife.with_shm(spec, shm)
            with TrackedContainer(client, spec, session=session) as server, contextlib.ExitStack() as stack:
                prober, _ = serve_run._prober(client, launch, server, stack)
                ready_s, _, _, log = serve_run._wait_ready(server, prober, time.monotonic(), START_TIMEOUT)
                assert ready_s is not None, sd.root_exception(log) or log[-3000:]
                killed = endoflife.kill(server)
            left = endoflife.read_shm(pod)
            pod.exec(["python3", "-c", PLANT, "/dev/shm/psm_planted", "50"], {}, 120.0)
            restart = serve_run._restart(client, launch, spec, pod, START_TIMEOUT)
    finally:
        sweep(client, session)
    assert killed["exit_code"] == 137 and killed["survivors"] == [], killed
    assert killed["target"]["pid"] == 1 and "serve" in killed["target"]["cmd"], killed
    assert any(p["cmd"].startswith("VLLM::EngineCore") for p in killed["tree"]), killed["tree"]
    assert left["count"] > 0 and left["files_bytes"] > 0, left  # the killed server's segments stayed
    assert restart["ready_s"] is None and restart["exit_code"] not in (None, 0), restart.get("log", "")[-3000:]
    seen = {"kill": killed, "shm_after_kill": left, **restart}  # the warm start is the restart
    problems, hints, facts, _ = endoflife.judge(seen, {})
    assert facts["failure_class"] == 43 and len(problems) == 1, problems
    assert "holds what a server that did not exit left there" in problems[0] and "psm_planted" in problems[0]
    assert "Insufficient space in /dev/shm" in problems[0] and "find /dev/shm" in hints[0]


def test_a_shell_that_outlives_the_server_keeps_what_the_kill_left(
    client: docker.DockerClient,
    cpu_image: str,
    derived_image: Any,
    tiny_model: Path,  # noqa: F811
) -> None:
    """Class 42: an image whose PID 1 is a shell that runs `vllm serve` and then stays (a wrapper that "keeps the
    container up"): the OOM killer's SIGKILL to the API server leaves the container running with what survived."""
    image = derived_image(['ENTRYPOINT ["/bin/sh", "-c", "vllm \\"$@\\"; sleep infinity", "vllm"]'])
    profile = Profile(name="pod", values={Condition.SHM_SIZE: "1g"})
    session = uuid.uuid4().hex[:12]
    labels = {OWNER_LABEL: OWNER, SESSION_LABEL: session}
    launch = serve_run.Launch(image=image, profile=profile, volume="", session=session, eager=True)
    spec = serve_line.server_spec(image, profile, "unused", eager=True)
    spec = dataclasses.replace(spec, volumes={str(tiny_model): {"bind": serve_line.MODEL_PATH, "mode": "ro"}})
    try:
        with contextlib.ExitStack() as stack:
            shm, _pod = stack.enter_context(endoflife.pod(client, image, profile, session, labels))
            server = stack.enter_context(TrackedContainer(client, endoflife.with_shm(spec, shm), session=session))
            prober, _ = serve_run._prober(client, launch, server, stack)
            ready_s, _, _, log = serve_run._wait_ready(server, prober, time.monotonic(), START_TIMEOUT)
            assert ready_s is not None, sd.root_exception(log) or log[-3000:]
            killed = endoflife.kill(server)
    finally:
        sweep(client, session)
    print(killed)  # what survived, for the record (pytest -s)
    assert killed["target"]["pid"] != 1 and killed["exit_code"] is None, killed
    assert killed["survivors"] and killed["survivors"][0]["pid"] == 1, killed
    # vllm#55510 itself: vLLM's own engine core or workers outlived the API server (not only the wrapper shell).
    assert any(str(p["cmd"]).startswith("VLLM::") for p in killed["survivors"]), killed
    problems, hints, facts, _ = endoflife.judge({"kill": killed, "shm_after_kill": {}}, {})
    assert facts["failure_class"] == 42 and len(problems) == 1, problems
    assert "process(es) alive holding" in problems[0] and "vllm#55510" in problems[0] and "PID 1" in hints[0]


# Class 44's bad image: in the API server (PID 1), every SIGTERM handler installed (uvicorn's) first SIGKILLs vLLM's
# engine core, as a signal sent to every process of the container (or the OOM killer at that moment) would: the
# stop then exits in time with an engine that died under the server.
STOP_HOOK = """\
import os, signal
if os.getpid() == 1:
    _install = signal.signal
    def _engines_first(sig, handler):
        if sig == signal.SIGTERM and callable(handler):
            inner = handler
            def handler(signum, frame):
                for pid in (p for p in os.listdir("/proc") if p.isdigit() and p != "1"):
                    try:
                        if open(f"/proc/{pid}/cmdline", "rb").read().startswith(b"VLLM::EngineCore"):
                            os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
                return inner(signum, frame)
        return _install(sig, handler)
    signal.signal = _engines_first
"""
# Class 45's bad image: the API server (PID 1) takes a pid file on the compile cache's volume and refuses to start
# where one exists (another server on this cache, it believes); a clean exit removes it, a SIGKILL leaves it behind.
PID_FILE = """\
import atexit, os, sys, traceback
if os.getpid() == 1 and os.path.isdir("/tmp/.cache"):
    try:
        fd = os.open("/tmp/.cache/vllm-api.pid", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os.write(fd, b"1")
    os.close(fd)
    atexit.register(os.unlink, "/tmp/.cache/vllm-api.pid")
"""
SITE = "/opt/venv/lib/python3.11/site-packages"


def _hook_image(derived_image: Any, tmp_path: Path, name: str, code: str) -> str:
    """The CPU image with ``code`` run at every interpreter's start (``<name>.py`` imported by a ``.pth``)."""
    (tmp_path / f"{name}.py").write_text(code)
    (tmp_path / f"{name}.pth").write_text(f"import {name}\n")
    copy = f"COPY --chmod=644 files/{name}.py files/{name}.pth {SITE}/"
    return str(derived_image([copy], files=[tmp_path / f"{name}.py", tmp_path / f"{name}.pth"]))


@pytest.fixture(scope="module")
def served_models(client: docker.DockerClient, cpu_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host folder holding the suite's tiny model at ``serve_line.MODEL_NAME`` (chat template kept), mounted at
    /models as the serve check mounts its model volume."""
    folder = tmp_path_factory.mktemp("served-models")
    folder.chmod(0o777)
    make = (
        f"import sys; sys.path.insert(0, '/programs'); import make_model; make_model.make('/m/{serve_line.MODEL_NAME}')"
    )
    client.containers.run(
        cpu_image,
        entrypoint=["python3", "-c", make, f"/m/{serve_line.MODEL_NAME}"],
        volumes={str(PROGRAMS): {"bind": "/programs", "mode": "ro"}, str(folder): {"bind": "/m", "mode": "rw"}},
        labels={OWNER_LABEL: OWNER},
        remove=True,
    )
    assert (folder / serve_line.MODEL_NAME / "config.json").exists()
    return folder


def test_a_stop_that_exits_in_time_with_an_engine_killed_under_it_is_one_failure(
    client: docker.DockerClient, derived_image: Any, served_models: Path, tmp_path: Path
) -> None:
    """Class 44: the serve check's own path (``observe``: ready, probes, the stop contract during a stream; eager, so
    one server) on an image whose SIGTERM kills the engine core before the API server stops it: the stop exits in
    time (or, seen once, hangs until SIGKILL), and the verdict fails on what the log shows, once, with its cause and
    hint."""
    image = _hook_image(derived_image, tmp_path, "stophook", STOP_HOOK)
    profile = Profile(name="pod", values={Condition.SHM_SIZE: "1g"})
    session = uuid.uuid4().hex[:12]
    launch = serve_run.Launch(
        image=image, profile=profile, volume=str(served_models), session=session, eager=True,
        ready_timeout_s=START_TIMEOUT,
    )  # fmt: skip
    try:
        seen = serve_run.observe(client, launch)
    finally:
        sweep(client, session)
    assert seen.ready_s is not None, sd.root_exception(seen.log) or seen.log[-3000:]
    stop = seen.stop
    print(stop["exit_code"], stop["seconds"], stop["stream"], stop["shutdown"])  # for the record (pytest -s)
    # Seen both ways: exit 0 in 1-4 s (the class), or the API server hung once its engine was gone, SIGKILLed after
    # the grace (then named as a consequence of the engine's death, below).
    clean_exit = stop["exit_code"] in (0, 143) and stop["seconds"] <= stop["grace_s"]
    assert stop["in_flight"] and (clean_exit or stop["exit_code"] == 137), stop
    status, diagnosis, hint, facts = serve_check.judge(
        seen, expected_tokens=None, vllm_version="0.32.0", ready_budget_s=None
    )
    assert status is Status.FAILED and facts["failure_class"] == 44, diagnosis
    assert [name for name, clean, _, _ in stop["shutdown"] if not clean] == ["engine-died"], stop["shutdown"]
    assert diagnosis.startswith("the stop the engine core died before the API server stopped it"), diagnosis
    assert diagnosis.count("the engine core died before") == 1, diagnosis
    assert ("(a consequence: the engine core died under the server)" in diagnosis) == (not clean_exit), diagnosis
    # vLLM's monitor names the death where it sees it before the stop begins; else the engine core's silence does.
    said = ("engine core exited unexpectedly", "send sigterm to process EngineCore")
    assert any(s in diagnosis for s in said) and "[shutdown] lines" in hint, (diagnosis, hint)
    assert "PID 1 is" not in diagnosis and "terminationGracePeriodSeconds" not in hint, (diagnosis, hint)


def test_a_restart_refused_by_what_the_killed_server_left_on_the_cache_is_one_failure(
    client: docker.DockerClient, derived_image: Any, served_models: Path, tmp_path: Path
) -> None:
    """Class 45: a pid file the killed server held on the compile cache's volume fails the restart in the same pod
    (a lock, not /dev/shm). The kill needs no ready server (the file is taken at the interpreter's start), so this
    costs two container starts, not a server's start-up: killed once its pid file is taken, restarted on the same
    volumes."""
    image = _hook_image(derived_image, tmp_path, "pidfile", PID_FILE)
    profile = Profile(name="pod", values={Condition.SHM_SIZE: "1g"})
    session = uuid.uuid4().hex[:12]
    labels = {OWNER_LABEL: OWNER, SESSION_LABEL: session}
    launch = serve_run.Launch(image=image, profile=profile, volume=str(served_models), session=session, eager=True)
    try:
        with contextlib.ExitStack() as stack:
            cache = stack.enter_context(serve_line.cache_volume(client, labels))
            spec = serve_line.server_spec(image, profile, str(served_models), eager=True, cache=(cache, "/tmp/.cache"))
            shm, pod = stack.enter_context(endoflife.pod(client, image, profile, session, labels))
            spec = endoflife.with_shm(spec, shm)
            with TrackedContainer(client, spec, session=session) as server:
                taken = ["python3", "-c", "import os, sys; sys.exit(not os.path.exists('/tmp/.cache/vllm-api.pid'))"]
                deadline = time.monotonic() + START_TIMEOUT
                while server.exec(taken, {}, 60.0)[0] != 0 and time.monotonic() < deadline:
                    assert server.wait(1.0) is None, server.logs()[-3000:]
                killed = endoflife.kill(server)
            left = endoflife.read_shm(pod)
            restart = serve_run._restart(client, launch, spec, pod, START_TIMEOUT)
    finally:
        sweep(client, session)
    assert killed["exit_code"] == 137 and killed["target"]["pid"] == 1, killed
    assert restart["ready_s"] is None and restart["exit_code"] == 1, restart.get("log", "")[-3000:]
    problems, hints, facts, _ = endoflife.judge({"kill": killed, "shm_after_kill": left, **restart}, {})
    print(problems, hints)  # the verdict, for the record (pytest -s)
    assert facts["failure_class"] == 45 and len(problems) == 1 and len(hints) == 1, problems
    assert "the restart in the same pod (after SIGKILL, on its /dev/shm and cache) exited (1)" in problems[0]
    assert "FileExistsError" in problems[0] and "/tmp/.cache/vllm-api.pid" in problems[0], problems
    assert "Insufficient space" not in problems[0] and hints == [endoflife.RESTART_HINT], (problems, hints)
