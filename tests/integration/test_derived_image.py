"""Images others build on (issue 19): docs/extending.md's install block, built FROM the CPU image as a user
would, passes the quick suite under `default` and `restricted` (less `serve`: the base image's servers are
proven by test_serve, and two more would cost CI minutes); a root step that remakes the cache root is
diagnosed where it came from, and its consequences are reported as such.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from matrixtool.build import hostfiles
from matrixtool.core.errors import ExitCode
from tests.conftest import REPO_ROOT
from tests.integration.conftest import TEST_REPOSITORY, json_of, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow]

# A root step that caches under the image's XDG_CACHE_HOME (uv), and one that bakes a file under /tmp.
UV_STEP = (
    "RUN --mount=type=secret,id=ca if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca "
    "SSL_CERT_FILE=/run/secrets/ca; fi && python -m pip install -c /opt/matrix/stack.txt uv && uv pip install six"
)
BAKED = (
    "RUN mkdir -p /tmp/.cache/huggingface/hub/models--tiny && echo '{}' > /tmp/.cache/huggingface/hub/models--tiny/x"
)


def install_block(package: str, base: str) -> list[str]:
    """docs/extending.md's Dockerfile block, FROM ``base``, installing ``package`` (the lines as documented)."""
    text = (REPO_ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```dockerfile\n(.*?)```", text, re.DOTALL)
    lines = block.replace("YOUR-PACKAGE", package).splitlines()
    assert lines[0].startswith("FROM ") and lines[-1] == "USER 1000:0", lines
    return [f"FROM {base}", *lines[1:]]


@pytest.fixture(scope="module")
def build_derived(client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A factory: ``build_derived(lines)`` builds a Dockerfile of ``lines`` with the CA bundle as secret ``ca``
    (where this machine has one, as `tools/matrix build` passes it); images removed afterwards."""
    made: list[str] = []
    ca = hostfiles.resolve_ca_cert(None, dict(os.environ))

    def build(lines: list[str]) -> str:
        tag = f"{TEST_REPOSITORY}/derived-{uuid.uuid4().hex[:8]}:latest"
        context = tmp_path_factory.mktemp("derived")
        (context / "Dockerfile").write_text("\n".join(lines) + "\n")
        secret = ["--secret", f"id=ca,src={ca}"] if ca is not None else []
        proc = subprocess.run(
            ["docker", "buildx", "build", "--load", *secret, "--tag", tag, str(context)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        made.append(tag)
        return tag

    yield build
    for tag in made:
        client.images.remove(tag, force=True)


def test_the_documented_install_block_gives_an_image_that_passes_under_both_profiles(
    build_derived: Any, cpu_image: str, out_dir: Path, tmp_path: Path
) -> None:
    lines = install_block("humanize", cpu_image)
    image = build_derived([*lines[:-1], UV_STEP, BAKED, lines[-1]])
    proc = matrix_cli(
        "test", "--image", image, "--as", "cpu", "--suite", "quick", "--skip", "serve",
        "--profile", "default", "--profile", "restricted", "--json", out=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json_of(proc)
    assert {c["profile"] for c in doc["checks"]} == {"default", "restricted"}
    assert all(c["status"] in ("passed", "skipped") for c in doc["checks"]), doc["checks"]
    # /tmp is a tmpfs under restricted: what the build wrote there is named as hidden at run time.
    assert re.search(r"/tmp: \d+ file\(s\).*hidden by the profile's tmpfs.*/tmp/\.cache/", proc.stderr), proc.stderr
    restricted = next(c for c in doc["checks"] if c["check"] == "run-conditions" and c["profile"] == "restricted")
    assert restricted["facts"]["hidden_by_tmpfs"]["/tmp"]["count"] >= 2, restricted["facts"]


def test_a_cache_root_remade_by_root_is_named_with_its_step_and_its_consequences_skip(
    build_derived: Any, cpu_image: str, tmp_path: Path
) -> None:
    step = "RUN rm -rf /tmp/.cache && mkdir /tmp/.cache"
    image = build_derived([f"FROM {cpu_image}", "USER root", step, "USER 1000:0"])
    proc = matrix_cli(
        "test", "--image", image, "--as", "cpu",
        "--only", "run-conditions", "--only", "vllm-import", "--only", "model-runner", "--json", out=tmp_path,
    )  # fmt: skip
    assert proc.returncode == ExitCode.SMOKE, proc.stdout[-4000:] + proc.stderr[-4000:]
    by_name = {c["check"]: c for c in json_of(proc)["checks"]}
    cause = by_name["run-conditions"]
    assert cause["status"] == "failed", cause
    assert "/tmp/.cache is owned by 0:0, mode 755" in cause["diagnosis"], cause
    assert "rm -rf /tmp/.cache && mkdir /tmp/.cache" in cause["diagnosis"], cause
    for name in ("vllm-import", "model-runner"):
        assert (by_name[name]["status"], by_name[name]["diagnosis"]) == ("skipped", "run-conditions failed"), by_name
