"""The tracked-container primitive on the real engine, in the CPU image: labels, bounded output of a huge and of a
garbage stream, the deadline of a hung exec, a published port, the exit code of a stop, the log of a failed
container kept, and no container left behind (the autouse leak check)."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import docker
import docker.errors
import pytest

from matrixtool.core.container import OWNER_LABEL, SESSION_LABEL, ContainerSpec, TrackedContainer
from matrixtool.incontainer.vllm_smoke.bounded import OutputLimit
from tests.integration.conftest import OWNER

LIMIT = OutputLimit(head_bytes=1000, tail_bytes=4000)


def sleeper(image: str) -> ContainerSpec:
    return ContainerSpec(image=image, entrypoint=["sleep"], command=["infinity"], init=True, network_mode="none")


def test_labels_and_bounded_output_of_a_huge_and_a_garbage_stream(client: docker.DockerClient, cpu_image: str) -> None:
    with TrackedContainer(client, sleeper(cpu_image)) as box:
        assert box.container is not None and box.container.id is not None
        labels = client.containers.get(box.container.id).labels
        assert labels[SESSION_LABEL] == box.session and labels[OWNER_LABEL] == OWNER
        huge = "import sys; sys.stdout.buffer.write(b'a' * 1000 + b'b' * 50_000_000 + b'END'); sys.exit(3)"
        code, out = box.exec(["python3", "-c", huge], {}, 120, LIMIT)
        assert code == 3 and len(out) < 6000
        assert out.startswith("a" * 1000 + "\n[... 49996003 bytes of output left out ...]\n") and out.endswith("bEND")
        code, out = box.exec(["head", "-c", "20000000", "/dev/urandom"], {}, 120, LIMIT)
        assert code == 0 and "bytes of output left out" in out and len(out.encode()) < 20_000


def test_a_hung_exec_returns_at_its_deadline_and_the_container_is_removed(
    client: docker.DockerClient, cpu_image: str
) -> None:
    with TrackedContainer(client, sleeper(cpu_image)) as box:
        started = time.monotonic()
        code, out = box.exec(["sh", "-c", "echo started; exec sleep 600"], {"A": "1"}, 3)
        assert code is None and out == "started\n" and time.monotonic() - started < 10
        assert box.container is not None and box.container.id is not None
        held = box.container.id
    assert not client.containers.list(all=True, filters={"id": held})


def test_a_published_port_answers_and_stop_returns_the_exit_code(client: docker.DockerClient, cpu_image: str) -> None:
    spec = ContainerSpec(
        image=cpu_image, entrypoint=["python3"], command=["-m", "http.server", "8000"], ports={"8000/tcp": None}
    )
    with TrackedContainer(client, spec) as box:
        port = box.host_port("8000/tcp")
        assert port is not None and box.host_port("9/tcp") is None
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
                    assert answer.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "the published port never answered"
                time.sleep(0.5)
        assert box.wait(0.5) is None, "still serving"
        assert box.stop(2) in (137, 143), "SIGTERM (143) or, past the grace, SIGKILL (137)"


def test_the_log_of_a_failed_container_is_kept(client: docker.DockerClient, cpu_image: str, tmp_path: Path) -> None:
    log = tmp_path / "failed.log"
    spec = ContainerSpec(image=cpu_image, entrypoint=["sh"], command=["-c", "echo boom >&2; exit 3"])
    with TrackedContainer(client, spec, failure_log=log) as box:
        assert box.wait(60) == 3
    assert log.read_text() == "boom\n"


def test_a_start_that_fails_after_the_engine_created_the_container_leaves_none(
    client: docker.DockerClient, cpu_image: str
) -> None:
    """The SDK's ``containers.run`` creates, then starts: a start the engine refuses leaves the created container
    unless the tracker removes it; a create-only container is removed as well."""
    spec = ContainerSpec(image=cpu_image, entrypoint=["/no/such/program"], command=[], network_mode="none")
    tracked = TrackedContainer(client, spec)
    with pytest.raises(docker.errors.APIError), tracked:
        pass
    assert client.containers.list(all=True, filters={"label": f"{SESSION_LABEL}={tracked.session}"}) == []
    with TrackedContainer(client, sleeper(cpu_image), create_only=True) as created:
        assert created.held().status == "created"
    assert client.containers.list(all=True, filters={"label": f"{SESSION_LABEL}={created.session}"}) == []
