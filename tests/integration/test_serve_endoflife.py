"""End of life beyond a clean stop (docs/failure-classes.md 42-45) with real servers of the CPU image: the serve
check's warm path (``serve.run._start_once`` in a pod of ``serve.endoflife``: SIGKILL once ready, /dev/shm read, a
restart in a fresh container on the same /dev/shm), eager (no compile) to keep it short. The good image under the
suite's profiles is judged by the session's run (test_serve.py); here the bad run conditions and images."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest

from matrixtool.core.container import OWNER_LABEL, SESSION_LABEL, sweep
from matrixtool.model.conditions import Condition
from matrixtool.model.profiles import Profile
from matrixtool.smoke.serve import endoflife
from matrixtool.smoke.serve import line as serve_line
from matrixtool.smoke.serve import run as serve_run
from tests.integration.conftest import OWNER
from tests.integration.test_serve_classes import START_TIMEOUT, tiny_model  # noqa: F401 - the module's fixture

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def warm_path(client: docker.DockerClient, image: str, model: Path, profile: Profile) -> dict[str, Any]:
    """The warm server of ``image`` under ``profile`` (eager, the tiny model) in a pod: ready, killed, restarted
    (``serve_run._start_once``); what it saw."""
    session = uuid.uuid4().hex[:12]
    labels = {OWNER_LABEL: OWNER, SESSION_LABEL: session}
    launch = serve_run.Launch(image=image, profile=profile, volume="", session=session, eager=True)
    spec = serve_line.server_spec(image, profile, "unused", eager=True)
    spec = dataclasses.replace(spec, volumes={str(model): {"bind": serve_line.MODEL_PATH, "mode": "ro"}})
    try:
        with endoflife.pod(client, image, profile, session, labels) as (shm, pod):
            return serve_run._start_once(
                client, launch, endoflife.with_shm(spec, shm), "/tmp/.cache", ready_timeout_s=START_TIMEOUT, pod=pod
            )
    finally:
        sweep(client, session)


def test_leftovers_of_a_killed_server_fail_the_restart_in_a_shm_sized_for_one(
    client: docker.DockerClient,
    cpu_image: str,
    tiny_model: Path,  # noqa: F811
) -> None:
    """Class 43: a /dev/shm of 250 MiB holds one CPU engine's 160 MiB message queue, not a dead one's beside it."""
    seen = warm_path(client, cpu_image, tiny_model, Profile(name="shm250", values={Condition.SHM_SIZE: "250m"}))
    assert seen["ready_s"] is not None, seen.get("log", "")[-3000:]
    killed = seen["kill"]
    assert killed["exit_code"] == 137 and killed["survivors"] == [], killed
    assert killed["target"]["pid"] == 1 and "serve" in killed["target"]["cmd"]
    assert any(p["cmd"].startswith("VLLM::EngineCore") for p in killed["tree"]), killed["tree"]
    assert seen["shm_after_kill"]["files_bytes"] > 100 * 2**20, seen["shm_after_kill"]
    problems, hints, facts, _ = endoflife.judge(seen, {})
    assert facts["failure_class"] == 43 and len(problems) == 1, problems
    assert "holds what a server that did not exit left there" in problems[0] and "psm_" in problems[0]
    assert "Insufficient space in /dev/shm" in problems[0] and "find /dev/shm" in hints[0]
