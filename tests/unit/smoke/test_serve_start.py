"""How the serve check starts an image (``serve.start.choose``), from its config and files (a dict stands for the
image's files), and what it does with an image no documented form serves."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

import pytest

from matrixtool.model.profiles import Profile
from matrixtool.smoke.result import Status
from matrixtool.smoke.serve import check as serve_check
from matrixtool.smoke.serve import line as serve_line
from matrixtool.smoke.serve import start as serve_start
from matrixtool.smoke.serve.start import API_MODULE, ImageConfig, Start

VLLM_SCRIPT = b"#!/opt/venv/bin/python\nimport sys\nfrom vllm.entrypoints.cli.main import main\nsys.exit(main())\n"
ELF = b"\x7fELF\x02\x01\x01"
PATH = "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"
# The files of an image like this project's: vllm in its venv, python3, sh.
IMAGE_FILES = {"/opt/venv/bin/vllm": VLLM_SCRIPT, "/opt/venv/bin/python3": ELF, "/usr/bin/python3": ELF, "/bin/sh": ELF}
MODEL, OPTIONS = "/models/m", ["--shutdown-timeout", "15"]


class Files:
    """``serve_start.Files`` of a dict: path -> content."""

    def __init__(self, files: Mapping[str, bytes]) -> None:
        self.files = dict(files)

    def read(self, path: str) -> bytes | None:
        return self.files.get(path)


def choose(entrypoint: list[str], files: Mapping[str, bytes] = IMAGE_FILES, **config: object) -> Start:
    attrs = {"Config": {"Entrypoint": entrypoint or None, "Env": [f"PATH={PATH}"], **config}}
    return serve_start.choose(ImageConfig.of(attrs), Files(files))


def with_script(text: str, path: str = "/usr/local/bin/docker-entrypoint.sh") -> dict[str, bytes]:
    return {**IMAGE_FILES, path: text.encode()}


@pytest.mark.parametrize(
    ("entrypoint", "form", "args"),
    [
        (["vllm", "serve"], "vllm-serve", [MODEL, *OPTIONS]),
        (["/opt/venv/bin/vllm", "serve"], "vllm-serve", [MODEL, *OPTIONS]),
        (["vllm"], "vllm", ["serve", MODEL, *OPTIONS]),
        (["python3", "-m", API_MODULE], "api-server", ["--model", MODEL, *OPTIONS]),
        (["/usr/bin/python3.11", "-u", "-m", API_MODULE], "api-server", ["--model", MODEL, *OPTIONS]),
        (["python3", "-m", "vllm.entrypoints.cli.main"], "vllm", ["serve", MODEL, *OPTIONS]),
        ([], "command", ["vllm", "serve", MODEL, *OPTIONS]),
        (["tini", "--"], "wrapper", ["vllm", "serve", MODEL, *OPTIONS]),
        (["/usr/bin/dumb-init", "--", "vllm", "serve"], "vllm-serve", [MODEL, *OPTIONS]),
    ],
)
def test_each_documented_entrypoint_gets_its_arguments(entrypoint: list[str], form: str, args: list[str]) -> None:
    start = choose(entrypoint)
    assert (start.form, start.args(MODEL, OPTIONS), start.problem) == (form, args, "")
    assert start.entrypoint is None  # the image's own ENTRYPOINT is kept


def test_without_entrypoint_and_without_vllm_on_path_the_api_server_module_is_the_command() -> None:
    files = {k: v for k, v in IMAGE_FILES.items() if not k.endswith("/vllm")}
    start = choose([], files)
    assert start.args(MODEL, []) == ["python3", "-m", API_MODULE, "--model", MODEL]
    assert "no ENTRYPOINT" in start.how and API_MODULE in start.how


@pytest.mark.parametrize(
    "script",
    [
        '#!/bin/sh\nset -e\nif [ "${1#-}" != "$1" ]; then set -- vllm serve "$@"; fi\nexec "$@"\n',
        '#!/usr/bin/env bash\n# run what we are given\nexport HF_HOME=/data\nexec "$@"\n',
        "#!/bin/sh\nexec $@\n",
    ],
)
def test_a_wrapper_that_runs_its_arguments_gets_the_whole_server_command(script: str) -> None:
    start = choose(["docker-entrypoint.sh"], with_script(script), Cmd=["vllm", "serve", "--help"])
    assert (start.form, start.args(MODEL, [])) == ("wrapper", ["vllm", "serve", MODEL])
    assert 'exec "$@"' in start.how


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ('#!/bin/sh\nexport X=1\nexec vllm serve "$@"\n', [MODEL]),
        ("#!/bin/bash\nexec python3 -m vllm.entrypoints.openai.api_server \\\n  --port 8000 $@\n", ["--model", MODEL]),
    ],
)
def test_a_wrapper_that_starts_the_server_with_its_arguments_gets_the_servers_arguments(
    script: str, args: list[str]
) -> None:
    start = choose(["/start.sh"], with_script(script, "/start.sh"))
    assert (start.form, start.args(MODEL, [])) == ("wrapper", args)


def test_a_script_is_found_relative_to_workdir_and_through_a_shell() -> None:
    files = with_script('#!/bin/sh\nexec "$@"\n', "/srv/app/start.sh")
    assert choose(["./start.sh"], files, WorkingDir="/srv/app").form == "wrapper"
    assert choose(["bash", "start.sh"], files, WorkingDir="/srv/app").form == "wrapper"


def test_a_sh_c_wrapper_that_runs_its_arguments_gets_a_dollar0_first() -> None:
    start = choose(["/bin/sh", "-c", 'ulimit -n 65536 && exec "$@"'])
    assert start.args(MODEL, []) == ["sh", "vllm", "serve", MODEL]


def test_the_shell_form_entrypoint_cannot_be_served_and_names_the_line_that_would() -> None:
    start = choose(["/bin/sh", "-c", "vllm serve"])  # Dockerfile: ENTRYPOINT vllm serve
    assert start.form == "none"
    assert "shell form" in start.problem and "drops every argument of docker run" in start.problem
    line = serve_line.working_line("img:1", start)
    assert line is not None
    argv = shlex.split(line)
    assert argv[argv.index("--entrypoint") + 1 : argv.index("img:1")] == ["vllm"]
    assert argv[argv.index("img:1") + 1 :][:2] == ["serve", "/models/MODEL"]


@pytest.mark.parametrize(
    ("entrypoint", "files", "words"),
    [
        (["/start.sh"], with_script("#!/bin/sh\nexec vllm serve /models/fixed --port 8000\n", "/start.sh"),
         "arguments of its own"),
        (["/start.sh"], with_script("#!/bin/sh\necho hello\n", "/start.sh"), 'neither runs its arguments'),
        (["/missing.sh"], IMAGE_FILES, "which the image does not have"),
        (["vllm", "chat"], IMAGE_FILES, "runs `vllm chat`, not `vllm serve`"),
        (["python3", "/app/main.py"], IMAGE_FILES, "runs a Python program, not vLLM's server"),
        (["/usr/local/bin/launcher"], {**IMAGE_FILES, "/usr/local/bin/launcher": ELF}, "cannot tell"),
    ],
)  # fmt: skip
def test_an_entrypoint_no_documented_form_serves_is_named(
    entrypoint: list[str], files: Mapping[str, bytes], words: str
) -> None:
    start = choose(entrypoint, files)
    assert start.form == "none" and words in start.problem, start.problem
    assert start.fix is not None and start.fix.entrypoint == ("vllm",)


def test_without_vllm_the_working_line_uses_python3_and_without_either_there_is_none() -> None:
    no_vllm = {k: v for k, v in IMAGE_FILES.items() if not k.endswith("/vllm")}
    start = choose(["/bin/sh", "-c", "vllm serve"], no_vllm)
    line = serve_line.working_line("img", start)
    assert line is not None and f"--entrypoint python3 img -m {API_MODULE} --model /models/MODEL" in line
    bare = choose(["/bin/sh", "-c", "vllm serve"], {"/bin/sh": ELF})
    assert serve_line.working_line("img", bare) is None
    assert "neither vllm nor python3 on its PATH" in bare.problem


def test_the_server_container_keeps_the_image_entrypoint_user_and_workdir() -> None:
    start = choose(["python3", "-m", API_MODULE])
    spec = serve_line.server_spec("img", Profile(name="default"), "vol", eager=True, start=start)
    assert spec.entrypoint is None and spec.user is None and "working_dir" not in spec.extra
    assert spec.command == ["--model", serve_line.MODEL_PATH, *serve_line.SERVE_OPTIONS, *serve_line.MODEL_OPTIONS,
                            "--enforce-eager"]  # fmt: skip
    # This project's images: the README's line, unchanged.
    assert serve_line.server_spec("img", Profile(name="default"), "vol").command == serve_line.serve_argv()


def test_an_unservable_image_is_one_failure_of_class_36_with_the_line() -> None:
    attrs = {"Config": {"Entrypoint": ["/bin/sh", "-c", "vllm serve"], "Env": [f"PATH={PATH}"], "User": "1000:0"}}
    config = ImageConfig.of(attrs)
    start = serve_start.choose(config, Files(IMAGE_FILES))
    status, diagnosis, hint, facts = serve_check.unservable("img:1", config, start)
    assert status is Status.FAILED and facts["failure_class"] == 36
    assert "shell form" in diagnosis and facts["working_line"] in diagnosis
    assert "--entrypoint" in hint
    assert facts["start"]["entrypoint"] == ["/bin/sh", "-c", "vllm serve"] and facts["start"]["user"] == "1000:0"


def test_the_config_facts_name_entrypoint_cmd_user_workdir_env_and_healthcheck() -> None:
    attrs = {
        "Config": {
            "Entrypoint": ["vllm"],
            "Cmd": ["--help"],
            "Env": ["PATH=/x", "HF_HOME=/data"],
            "Healthcheck": {"Test": ["CMD", "curl", "-f", "localhost:8000/health"]},
        }
    }
    facts = serve_check.start_facts(ImageConfig.of(attrs), serve_line.PROJECT_START, "1000770000:0")
    assert facts == {
        "form": "vllm",
        "how": serve_line.PROJECT_START.how,
        "entrypoint": ["vllm"],
        "cmd": ["--help"],
        "user": "root (none set)",
        "workdir": "/",
        "env": ["HF_HOME", "PATH"],
        "healthcheck": ["CMD", "curl", "-f", "localhost:8000/health"],
        "run_as": "1000770000:0",
    }
