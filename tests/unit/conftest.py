"""Unit tests of pure logic: an autouse guard makes them unable to reach a Docker engine."""

from __future__ import annotations

from typing import Any

import docker
import pytest


class _NoEngine(docker.errors.DockerException):
    pass


@pytest.fixture(autouse=True)
def no_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to create a Docker client fails, like an unreachable engine."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise _NoEngine("unit tests must not reach a Docker engine")

    monkeypatch.setattr(docker, "from_env", refuse)
    monkeypatch.setattr(docker, "DockerClient", refuse)
