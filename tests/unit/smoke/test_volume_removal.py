"""The serve step's volumes (model, compile cache, /dev/shm: ``serve.line.fresh_volume``) are removed on the way out
even where the engine still removes an AutoRemove container that holds one: the engine never removes a named volume
with its container, so a removal given up at the first 409 leaves the volume for good."""

from __future__ import annotations

from typing import Any

import docker.errors
import pytest
import requests

from matrixtool.smoke.serve import endoflife
from matrixtool.smoke.serve import line as serve_line


class _Volume:
    def __init__(self, engine: _Engine) -> None:
        self.engine = engine

    def remove(self, force: bool = False) -> None:
        self.engine.tries += 1
        if self.engine.errors:
            raise self.engine.errors.pop(0)
        self.engine.removed = True


class _Engine:
    """The volumes API of a Docker client: ``errors`` raised by the first removals, in order."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.tries = 0
        self.removed = False
        self.created: list[dict[str, Any]] = []
        self.volumes = self

    def create(self, **kwargs: Any) -> None:
        self.created.append(kwargs)

    def get(self, name: str) -> _Volume:
        return _Volume(self)


def _in_use() -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = 409
    return docker.errors.APIError("volume is in use", response=response)


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("matrixtool.smoke.serve.line.time.sleep", lambda s: None)


def test_a_volume_still_held_by_a_container_going_away_is_removed_once_released() -> None:
    engine = _Engine(_in_use(), _in_use())
    with serve_line.fresh_volume(engine, "model", {"io.vllm-matrix.owner": "me"}) as name:  # type: ignore[arg-type]
        assert name.startswith("vllm-matrix-model-")
    assert engine.removed and engine.tries == 3
    assert engine.created[0]["labels"] == {"io.vllm-matrix.owner": "me"}


def test_a_volume_held_past_the_wait_or_gone_is_given_up_without_an_error() -> None:
    held = _Engine(*[_in_use()] * 1000)
    serve_line.remove_volume(held, "v", wait_s=0.0)  # type: ignore[arg-type]
    assert not held.removed and held.tries == 1
    for error in (docker.errors.NotFound("no such volume"), requests.exceptions.ConnectionError("engine gone")):
        gone = _Engine(error)
        serve_line.remove_volume(gone, "v")  # type: ignore[arg-type]
        assert not gone.removed and gone.tries == 1


def test_the_pods_shm_volume_is_made_and_removed_as_the_others() -> None:
    engine = _Engine(_in_use())
    with endoflife.shm_volume(engine, {}, "1g") as name:  # type: ignore[arg-type]
        assert name.startswith("vllm-matrix-shm-")
    assert engine.removed and engine.tries == 2
    assert engine.created[0]["driver_opts"] == {"type": "tmpfs", "device": "tmpfs", "o": "size=1g,mode=1777"}
