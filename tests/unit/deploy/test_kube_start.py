"""``tools/matrix kube`` starts the server the way the image's users must (class 36): the form read from the image
(``serve_start.choose``, as serve reads it) decides the container's ``command`` and ``args``; where the image is not
on the engine, this project's form is assumed and said so (the ``io.vllm-matrix/start`` annotation and the
command's line)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from matrixtool.commands import kube as kube_command
from matrixtool.core.errors import ConfigError
from matrixtool.deploy import kube
from matrixtool.model.matrixfile import load_matrix
from matrixtool.smoke.serve import line as serve_line
from matrixtool.smoke.serve.start import API_MODULE
from tests.unit.smoke.test_serve_start import IMAGE_FILES, choose

CPU = next(v for v in load_matrix().variants if v.name == "cpu")
MODEL = "/models/m"
OPTIONS = ["--shutdown-timeout", "15"]


def _container(start: Any, source: str = "read") -> dict[str, Any]:
    serving = kube.serving_for(
        CPU, "default", None, model=MODEL, claim="c", start=(kube.start_in_pod(start, "img"), source)
    )
    docs = kube.manifests(variant="cpu", accelerator="cpu", profile="default", values={}, image="img", serving=serving)
    template = docs[0]["spec"]["template"]
    assert template["metadata"]["annotations"][kube.START_ANNOTATION].endswith(f"({source})")
    return dict(template["spec"]["containers"][0])


@pytest.mark.parametrize(
    ("entrypoint", "command", "args"),
    [
        (["vllm"], None, ["serve", MODEL, *OPTIONS]),
        (["vllm", "serve"], None, [MODEL, *OPTIONS]),
        (["python3", "-m", API_MODULE], None, ["--model", MODEL, *OPTIONS]),
        (["tini", "--"], None, ["vllm", "serve", MODEL, *OPTIONS]),
        ([], None, ["vllm", "serve", MODEL, *OPTIONS]),
        # The shell form drops every argument: no documented form, so the pod replaces the ENTRYPOINT.
        (["/bin/sh", "-c", "vllm serve /models/baked"], ["vllm"], ["serve", MODEL, *OPTIONS]),
    ],
)
def test_each_form_gets_the_pod_spec_its_users_must_write(
    entrypoint: list[str], command: list[str] | None, args: list[str]
) -> None:
    container = _container(choose(entrypoint))
    assert container.get("command") == command and container["args"] == args, container


def test_the_project_form_is_the_args_the_kube_command_wrote_before() -> None:
    assert _container(serve_line.PROJECT_START)["args"] == serve_line.serve_argv(MODEL, ())
    assert "command" not in _container(serve_line.PROJECT_START)


def test_an_image_no_command_can_serve_is_refused_naming_why() -> None:
    bare = choose(["/bin/sh", "-c", "exec server"], files={"/bin/sh": IMAGE_FILES["/bin/sh"]})
    with pytest.raises(ConfigError) as err:
        kube.start_in_pod(bare, "img:1")
    assert "img:1: no documented form serves it" in str(err.value) and "vllm or python3" in str(err.value)


def test_the_command_writes_the_form_it_read_and_says_how_it_knew(tmp_path: Path) -> None:
    read = choose(["vllm", "serve"])
    args = kube_command.Args(
        variants=(CPU,), profiles=("default",), out=tmp_path, read_start=lambda image: (read, f"read from {image}")
    )
    (written,) = kube_command.run(args)
    assert (written.start, written.start_source) == ("vllm-serve", "read from vllm-matrix/cpu:0.32.0")
    (deployment, *_) = yaml.safe_load_all(written.path.read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:1] == [serve_line.MODEL_PATH] and "command" not in container


def test_without_the_image_the_project_form_is_assumed_and_said_so(tmp_path: Path) -> None:
    # The unit tests' guard refuses the engine: the command's reader falls back, naming why.
    starts = kube_command.ImageStarts()
    start, source = starts("registry.example/vllm:1")
    assert start == serve_line.PROJECT_START and source.startswith(kube.START_ASSUMED)
    assert "registry.example/vllm:1: no Docker engine answers" in source, source
    (written,) = kube_command.run(
        kube_command.Args(variants=(CPU,), profiles=("default",), out=tmp_path, read_start=starts)
    )
    assert written.start == "vllm" and "assumed, not read" in written.start_source
