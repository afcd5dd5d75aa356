"""End of life beyond a clean stop (docs/failure-classes.md 42-45) with a real server of the CPU image, eager (no
compile) to keep it short: the serve check's warm path in a pod of ``serve.endoflife`` (ready, SIGKILL, /dev/shm
read, a restart in a fresh container on the same /dev/shm), with leftovers planted in /dev/shm before the restart.
The good image under the suite's profiles is judged by the session's run (test_serve.py)."""

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
from matrixtool.smoke.serve import diagnosis as sd
from matrixtool.smoke.serve import endoflife
from matrixtool.smoke.serve import line as serve_line
from matrixtool.smoke.serve import run as serve_run
from tests.integration.conftest import OWNER
from tests.integration.test_serve_classes import START_TIMEOUT, tiny_model  # noqa: F401 - the module's fixture

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
    seen = {"kill": killed, "shm_after_kill": left, "restart": restart}
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
