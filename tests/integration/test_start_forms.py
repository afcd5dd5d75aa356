"""How published images start (issue 35, failure class 36): look-alikes of each documented form, built FROM the CPU
image, each served by `tools/matrix test --only serve` (the quick suite's eager server) in the form its ENTRYPOINT
calls for, without offline-generate (the server's tokens are the CPU image's, compared by the session's `run cpu`);
and one no documented form serves (the shell form of ENTRYPOINT), caught with one failure that names the cause and
the `docker run` line that would serve it. The CPU image itself (ENTRYPOINT ["vllm"]) is the `vllm` form, served by
the session's `tools/matrix run cpu` (test_serve).

The look-alikes are built once for the module and their runs go side by side (``RUNS_AT_ONCE``): each run is one
check container and one server. Measured 2026-12-07 on 2 cores: 3 or 5 at once took the same (165, 163 s: the
runs are CPU-bound); leaving out offline-generate's engine cut the module to 141 s.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker
import pytest

from matrixtool.core.container import OWNER_LABEL
from matrixtool.core.errors import ExitCode
from tests.integration.conftest import OWNER, build_derived, json_of, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow]

RUNS_AT_ONCE = 3
# An entrypoint script as official images write them: an option first means the server's, then it runs its arguments.
WRAPPER = ("#!/bin/sh", "set -e", 'if [ "${1#-}" != "$1" ]; then set -- vllm serve "$@"; fi', 'exec "$@"')
# The Dockerfile lines after FROM of each look-alike, by the form the serve check must start it in.
LOOK_ALIKES: dict[str, list[str]] = {
    # vLLM's own recent images.
    "vllm-serve": ['ENTRYPOINT ["vllm", "serve"]'],
    # Older images and many derived ones.
    "api-server": ['ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]'],
    # A shell wrapper with CMD.
    "wrapper": [
        "USER root",
        f"RUN printf '%s\\n' {' '.join(shlex.quote(line) for line in WRAPPER)} > /usr/local/bin/docker-entrypoint.sh "
        "&& chmod 755 /usr/local/bin/docker-entrypoint.sh",
        "USER 1000:0",
        'ENTRYPOINT ["docker-entrypoint.sh"]',
        'CMD ["vllm", "serve", "--help"]',
    ],
    # No ENTRYPOINT, a plain Python image's CMD, another user and working directory (both honoured).
    "command": ["ENTRYPOINT []", 'CMD ["python3"]', "USER 1001:0", "WORKDIR /srv"],
    # The shell form of ENTRYPOINT: /bin/sh -c "vllm serve" drops every argument of docker run.
    "none": ["ENTRYPOINT vllm serve"],
}


@pytest.fixture(scope="module")
def look_alikes(
    client: docker.DockerClient, cpu_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """Each look-alike built FROM the CPU image ({form: tag}); removed afterwards."""
    made: dict[str, str] = {}
    try:
        for form, lines in LOOK_ALIKES.items():
            context = tmp_path_factory.mktemp(f"start-{form}")
            made[form] = build_derived(cpu_image, context, lines, name=f"start-{form}")
        yield made
    finally:
        for tag in made.values():
            client.images.remove(tag, force=True)


@pytest.fixture(scope="module")
def served(look_alikes: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`tools/matrix test --image LOOK-ALIKE --as cpu --suite quick --only serve --json` of each look-alike, side by
    side: {form: (the process, its JSON document)}."""

    def serve(form: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        out = tmp_path_factory.mktemp(f"served-{form}")
        args = ["test", "--image", look_alikes[form], "--as", "cpu", "--suite", "quick", "--only", "serve", "--json"]
        args += ["--skip", "offline-generate"]  # its tokens are the CPU image's, compared in the session's `run cpu`
        proc = matrix_cli(*args, out=out)
        return proc, json_of(proc)

    with ThreadPoolExecutor(max_workers=RUNS_AT_ONCE) as pool:
        runs = dict(zip(LOOK_ALIKES, pool.map(serve, LOOK_ALIKES), strict=True))
    return runs


def _serve_check(doc: dict[str, Any]) -> dict[str, Any]:
    (check,) = [c for c in doc["checks"] if c["check"] == "serve"]
    return dict(check)


@pytest.mark.parametrize("form", ["vllm-serve", "api-server", "wrapper", "command"])
def test_each_documented_form_is_served_as_its_users_start_it(served: dict[str, Any], form: str) -> None:
    proc, doc = served[form]
    check = _serve_check(doc)
    assert proc.returncode == 0 and check["status"] == "passed", proc.stdout[-4000:] + proc.stderr[-4000:]
    start = check["facts"]["start"]
    assert start["form"] == form, start
    assert f"started in the {form} form" in check["diagnosis"], check["diagnosis"]
    # The image's HEALTHCHECK (inherited from the CPU image) is read, reported and passes against the server.
    assert start["healthcheck"][0] == "CMD" and check["facts"]["healthcheck"]["healthy"], check["facts"]
    argv = check["facts"]["argv"]
    expected_head = {
        "vllm-serve": ["/models/tiny-llama"],
        "api-server": ["--model", "/models/tiny-llama"],
        "wrapper": ["vllm", "serve", "/models/tiny-llama"],
        "command": ["vllm", "serve", "/models/tiny-llama"],
    }[form]
    assert argv[: len(expected_head)] == expected_head, argv
    # PID 1 was the server itself (an exec-ing wrapper leaves no shell in front of it).
    assert "vllm" in check["facts"]["stop"]["pid1"], check["facts"]["stop"]


def test_the_image_user_and_workdir_are_honoured(served: dict[str, Any]) -> None:
    start = _serve_check(served["command"][1])["facts"]["start"]
    assert (start["user"], start["run_as"], start["workdir"]) == ("1001:0", "1001:0", "/srv"), start
    assert (start["entrypoint"], start["cmd"]) == ([], ["python3"]), start


def test_an_image_no_documented_form_serves_is_one_failure_with_the_line_that_would(
    served: dict[str, Any], look_alikes: dict[str, str]
) -> None:
    proc, doc = served["none"]
    assert proc.returncode == ExitCode.SMOKE, proc.stdout[-4000:] + proc.stderr[-4000:]
    failed = [c for c in doc["checks"] if c["status"] != "passed"]
    assert [c["check"] for c in failed] == ["serve"], failed
    (check,) = failed
    assert check["facts"]["failure_class"] == 36, check
    assert "shell form" in check["diagnosis"] and "/bin/sh -c 'vllm serve'" in check["diagnosis"], check
    assert "APIError" not in check["diagnosis"] and "executable file not found" not in check["diagnosis"], check
    line = check["facts"]["working_line"]
    assert line in check["diagnosis"]
    argv = shlex.split(line)
    image = look_alikes["none"]
    assert argv[:3] == ["docker", "run", "--rm"] and argv[argv.index(image) - 2 : argv.index(image)] == [
        "--entrypoint",
        "vllm",
    ], argv
    assert argv[argv.index(image) + 1 :][:2] == ["serve", "/models/MODEL"], argv


def test_the_line_named_for_an_unservable_image_starts_its_server(
    served: dict[str, Any], look_alikes: dict[str, str], client: docker.DockerClient
) -> None:
    """The line's own entrypoint and arguments, started with ``--help`` for the model: `vllm serve --help` exits 0
    (the line names a program the image has, and the subcommand it takes)."""
    line = _serve_check(served["none"][1])["facts"]["working_line"]
    argv = shlex.split(line)
    image = look_alikes["none"]
    entrypoint = argv[argv.index("--entrypoint") + 1]
    args = argv[argv.index(image) + 1 :]
    output = client.containers.run(
        image, entrypoint=[entrypoint], command=[args[0], "--help"], remove=True, labels={OWNER_LABEL: OWNER}
    )
    assert b"model" in output.lower(), output[-2000:]
