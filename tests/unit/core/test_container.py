"""The tracked-container primitive against a fake Docker client: labels, restart, bounded exec output, deadline,
removal and the sweep on Ctrl-C, the exec-format mapping, ports, logs kept on failure."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import requests.exceptions

from matrixtool.core import container
from matrixtool.core.container import ContainerSpec, TrackedContainer
from matrixtool.core.errors import WrongPlatformError
from matrixtool.incontainer.vllm_smoke.bounded import BoundedOutput, OutputLimit


class FakeContainer:
    def __init__(self, engine: FakeEngine, kwargs: dict[str, Any]) -> None:
        self.engine = engine
        self.kwargs = kwargs
        self.id = f"c{len(engine.created)}"
        self.labels = kwargs.get("labels", {})
        self.removed = False
        self.attrs: dict[str, Any] = {"State": {"Status": "running", "ExitCode": 0}}
        self.log = b""
        self.exit_code: int | None = 0

    def remove(self, force: bool = False) -> None:
        assert force
        if self.removed:
            raise docker.errors.NotFound("gone")
        self.removed = True

    def reload(self) -> None:
        pass

    def logs(self, stream: bool, follow: bool, tail: Any) -> Iterator[bytes]:
        assert stream and not follow
        yield self.log

    def wait(self, timeout: float) -> dict[str, Any]:
        if self.exit_code is None:
            raise requests.exceptions.ReadTimeout()
        return {"StatusCode": self.exit_code}

    def stop(self, timeout: int) -> None:
        self.stopped_with = timeout
        self.exit_code = 143


class FakeContainers:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def create(self, **kwargs: Any) -> FakeContainer:
        made = FakeContainer(self.engine, kwargs)
        self.engine.created.append(made)
        return made

    def run(self, **kwargs: Any) -> FakeContainer:
        if self.engine.fail_with is not None:
            if self.engine.created_before_failing:
                self.create(**kwargs)  # the SDK's run: create, then start, which fails
            raise self.engine.fail_with
        return self.create(**kwargs)

    def list(self, all: bool, filters: dict[str, str]) -> list[FakeContainer]:
        key, value = filters["label"].split("=", 1)
        return [c for c in self.engine.created if c.labels.get(key) == value and not c.removed]


class FakeApi:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    def exec_create(self, container_id: str, argv: list[str], environment: dict[str, str]) -> dict[str, str]:
        self.engine.execs.append((container_id, argv, environment))
        return {"Id": "e1"}

    def exec_start(self, exec_id: str, stream: bool) -> Any:
        return self.engine.stream()

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        return {"ExitCode": 3}


class FakeEngine:
    """The parts of ``docker.DockerClient`` the primitive calls."""

    def __init__(self) -> None:
        self.created: list[FakeContainer] = []
        self.execs: list[tuple[str, list[str], dict[str, str]]] = []
        self.fail_with: Exception | None = None
        self.created_before_failing = False
        self.containers = FakeContainers(self)
        self.api = FakeApi(self)
        self.stream: Any = lambda: iter([b"hello ", b"world\n"])


def tracked(engine: FakeEngine, spec: ContainerSpec | None = None, **kwargs: Any) -> TrackedContainer:
    return TrackedContainer(engine, spec or ContainerSpec(image="img:1"), session="s1", owner="me", **kwargs)  # type: ignore[arg-type]


def test_run_kwargs_label_and_merge_the_profile_below_the_spec() -> None:
    spec = ContainerSpec(
        image="img:1",
        entrypoint=["sleep"],
        command=["infinity"],
        tmpfs={"/run/x": "size=1g"},
        environment={"A": "spec"},
        shm_size="1g",
        init=True,
        ports={"8000/tcp": None},
        extra={"tmpfs": {"/tmp": "rw"}, "environment": {"A": "profile", "B": "b"}, "user": "1000", "shm_size": "64m"},
    )
    kwargs = spec.run_kwargs(session="s1", owner="me")
    assert kwargs == {
        "image": "img:1",
        "detach": True,
        "entrypoint": ["sleep"],
        "command": ["infinity"],
        "tmpfs": {"/tmp": "rw", "/run/x": "size=1g"},
        "environment": {"A": "spec", "B": "b"},
        "labels": {container.SESSION_LABEL: "s1", container.OWNER_LABEL: "me"},
        "user": "1000",
        "shm_size": "1g",
        "init": True,
        "ports": {"8000/tcp": None},
    }
    bare = ContainerSpec(image="img:1").run_kwargs(session="s", owner="")
    assert "entrypoint" not in bare and "command" not in bare, "None keeps the image's ENTRYPOINT and CMD"


def test_the_owner_label_comes_from_matrix_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(container.OWNER_ENV_VAR, "suite-7")
    box = TrackedContainer(FakeEngine(), ContainerSpec(image="i"))  # type: ignore[arg-type]
    assert box.owner == "suite-7" and len(box.session) == 12


def test_a_container_is_removed_on_exit_and_replaced_on_restart() -> None:
    engine = FakeEngine()
    with tracked(engine) as box:
        first = engine.created[0]
        box.start()
        assert first.removed and not engine.created[1].removed
    assert all(c.removed for c in engine.created) and box.container is None
    box.remove()  # nothing held: no error


def test_ctrl_c_sweeps_every_container_of_the_session() -> None:
    engine = FakeEngine()
    stray = FakeContainer(engine, {"labels": {container.SESSION_LABEL: "s1"}})
    other = FakeContainer(engine, {"labels": {container.SESSION_LABEL: "s2"}})
    engine.created += [stray, other]
    with pytest.raises(KeyboardInterrupt), tracked(engine):
        raise KeyboardInterrupt
    assert stray.removed and not other.removed


def test_exec_format_error_is_wrong_platform() -> None:
    engine = FakeEngine()
    engine.fail_with = docker.errors.APIError("OCI runtime create failed: exec format error")
    with pytest.raises(WrongPlatformError, match="exec format error starting img:1"), tracked(engine):
        pass
    engine.fail_with = docker.errors.APIError("no such network")
    with pytest.raises(docker.errors.APIError), tracked(engine):
        pass


def test_a_container_created_before_the_start_failed_is_removed_and_its_siblings_kept() -> None:
    engine = FakeEngine()
    sibling = FakeContainer(engine, {"labels": {container.SESSION_LABEL: "s1"}})
    engine.created.append(sibling)
    engine.fail_with = docker.errors.APIError("OCI runtime create failed: exec format error")
    engine.created_before_failing = True
    with pytest.raises(WrongPlatformError), tracked(engine):
        pass
    left = engine.created[1]
    assert left.labels[container.CONTAINER_LABEL] and left.removed
    assert not sibling.removed, "a failed start removes its own container, not the session's"


def test_create_only_creates_and_never_starts() -> None:
    engine = FakeEngine()
    engine.fail_with = docker.errors.APIError("run must not be called")
    with tracked(engine, create_only=True) as box:
        made = engine.created[0]
        assert box.container is made  # type: ignore[comparison-overlap]
        assert "detach" not in made.kwargs
        assert made.labels[container.SESSION_LABEL] == "s1" and made.labels[container.OWNER_LABEL] == "me"
    assert made.removed


def test_exec_returns_the_exit_code_and_output() -> None:
    engine = FakeEngine()
    with tracked(engine) as box:
        assert box.exec(["true"], {"X": "1"}, 5) == (3, "hello world\n")
    assert engine.execs == [("c0", ["true"], {"X": "1"})]


def test_exec_past_its_deadline_returns_none_and_the_output_so_far() -> None:
    engine = FakeEngine()

    class Hung:
        """A stream that yields one chunk, then blocks until it is closed (as ``CancellableStream.close``)."""

        def __init__(self) -> None:
            self.closed = threading.Event()
            self.sent = False

        def __iter__(self) -> Hung:
            return self

        def __next__(self) -> bytes:
            if not self.sent:
                self.sent = True
                return b"started\n"
            self.closed.wait(10)
            raise StopIteration

        def close(self) -> None:
            self.closed.set()

    stream = Hung()
    engine.stream = lambda: stream
    with tracked(engine) as box:
        assert box.exec(["sleep", "1d"], {}, 0.2) == (None, "started\n")
    assert stream.closed.is_set(), "the reader is woken, not left blocked on the socket"


def test_a_huge_stream_keeps_its_head_and_tail_and_says_what_it_left_out() -> None:
    engine = FakeEngine()
    engine.stream = lambda: (bytes([65 + i % 26]) * 1000 for i in range(10_000))  # 10 MB
    with tracked(engine) as box:
        code, out = box.exec(["yes"], {}, 5, OutputLimit(head_bytes=1500, tail_bytes=2500))
    head, mark, tail = out.partition("\n[... 9996000 bytes of output left out ...]\n")
    assert code == 3 and mark
    assert head == "A" * 1000 + "B" * 500
    assert tail == "N" * 500 + "O" * 1000 + "P" * 1000  # chunks 9997..9999 (9997 % 26 == 13)


def test_garbage_bytes_are_replaced_not_raised() -> None:
    sink = BoundedOutput(OutputLimit(head_bytes=2, tail_bytes=2))
    sink.feed(b"\xff\xfeok\xc3")
    assert sink.text() == "\ufffd\ufffd\n[... 1 bytes of output left out ...]\nk\ufffd"


def test_wait_stop_and_the_published_port() -> None:
    engine = FakeEngine()
    with tracked(engine) as box:
        held = engine.created[0]
        held.exit_code = None
        assert box.wait(0.1) is None, "still running"
        assert box.stop(5) == 143 and held.stopped_with == 5
        held.attrs["NetworkSettings"] = {
            "Ports": {"8000/tcp": [{"HostIp": "::", "HostPort": "4001"}, {"HostIp": "0.0.0.0", "HostPort": "4000"}]}
        }
        assert box.host_port("8000/tcp") == 4000 and box.host_port("9/tcp") is None
    with pytest.raises(RuntimeError, match="start"):
        box.wait(1)


def test_the_log_of_a_failed_container_is_kept_when_asked(tmp_path: Path) -> None:
    engine = FakeEngine()
    log = tmp_path / "logs" / "server.log"
    with tracked(engine, failure_log=log):
        engine.created[0].log = b"fine\n"
    assert not log.exists(), "a container that did not fail leaves no log"
    with tracked(engine, failure_log=log):
        engine.created[1].log = b"Traceback: boom\n"
        engine.created[1].attrs["State"] = {"Status": "exited", "ExitCode": 1}
    assert log.read_text() == "Traceback: boom\n"
    with pytest.raises(ValueError), tracked(engine, failure_log=tmp_path / "raised.log"):
        engine.created[2].log = b"x\n"
        raise ValueError
    assert (tmp_path / "raised.log").read_text() == "x\n"


def test_a_container_whose_engine_went_away_is_removed_once_it_is_back(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine()
    box = tracked(engine)
    box.start()
    gone = requests.exceptions.ConnectionError("Connection aborted.")

    def remove_gone(force: bool = False) -> None:
        raise gone

    monkeypatch.setattr(engine.created[0], "remove", remove_gone)
    answers: list[Exception | None] = [gone, gone, None]  # the engine answers on the third try
    removed: list[str] = []

    def remove_container(container_id: str, force: bool) -> None:
        answer = answers.pop(0)
        if answer is not None:
            raise answer
        removed.append(container_id)

    engine.api.remove_container = remove_container  # type: ignore[attr-defined]
    monkeypatch.setattr("matrixtool.core.container.time.sleep", lambda s: None)
    box.remove()
    assert removed == ["c0"] and box.container is None


def test_the_wait_for_the_engine_is_bounded() -> None:
    class Gone:
        def remove_container(self, container_id: str, force: bool) -> None:
            raise requests.exceptions.ConnectionError("refused")

    class Client:
        api = Gone()

    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    assert not container.remove_when_back(Client(), "c0", 5.0, sleep=sleep, clock=lambda: now[0])  # type: ignore[arg-type]
    assert now[0] == 5.0


def test_an_auto_remove_container_is_left_to_the_engine_when_it_went_away(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine()
    box = tracked(engine, ContainerSpec(image="img:1", auto_remove=True))
    box.start()
    assert engine.created[0].kwargs["auto_remove"] is True

    def remove_gone(force: bool = False) -> None:
        raise requests.exceptions.ConnectionError("gone")

    monkeypatch.setattr(engine.created[0], "remove", remove_gone)
    monkeypatch.setattr(container, "remove_when_back", lambda *a, **k: pytest.fail("waited for the engine"))
    box.remove()
    assert box.container is None


def test_an_engine_back_before_the_exec_is_inspected_is_reported_as_gone_not_as_refused() -> None:
    """The stream broke (the engine stopped) and the restarted engine knows no such exec: requests'
    ConnectionError (the CLI's 'went away', exit 8), not NotFound ('refused a request')."""
    engine = FakeEngine()

    def broken() -> Any:
        yield b"partial"
        raise requests.exceptions.ConnectionError("Connection aborted.")

    def gone(exec_id: str) -> dict[str, Any]:
        raise docker.errors.NotFound("No such exec instance")

    engine.stream = broken
    with tracked(engine) as box:
        box.client.api.exec_inspect = gone  # type: ignore[method-assign]
        with pytest.raises(requests.exceptions.ConnectionError, match="the exec's stream broke"):
            box.exec(["true"], {}, 5)
