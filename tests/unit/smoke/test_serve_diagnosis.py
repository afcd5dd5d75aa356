"""serve_diagnosis: each serving failure class from the log lines, exit codes and bodies captured on the CPU image
(vLLM 0.32.0; tests/unit/data/serve/, cut to the lines that matter; the commands are in docs/failure-classes.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from matrixtool.incontainer.vllm_smoke import servediag
from matrixtool.smoke.serve import diagnosis as sd
from matrixtool.smoke.serve import route_diagnosis as srd

DATA = Path(__file__).parent.parent / "data" / "serve"


def log(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_shm_names_sizes_and_both_fixes() -> None:
    d = sd.diagnose_log(log("shm-64m.log"), 1)
    assert d is not None
    assert (d.failure_class, d.name) == (15, "shm-too-small")
    assert d.cause.startswith("RuntimeError: Insufficient space in /dev/shm")
    assert "160 MiB" in d.diagnosis and "64 MiB free" in d.diagnosis
    assert "--shm-size" in d.fix and "emptyDir: {medium: Memory" in d.fix and "/dev/shm" in d.fix
    assert "at least 160 MiB" in d.fix
    assert "160 MiB required, 64 MiB free" in d.render()


def test_root_exception_skips_vllms_consequence_lines() -> None:
    # The API server's last line says only that the engine failed; the engine's own error is the cause.
    assert (sd.root_exception(log("shm-64m.log")) or "").startswith(
        "RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: 160 MiB required"
    )
    assert (sd.root_exception(log("vllm-port.log")) or "").startswith("ValueError: VLLM_PORT")


def test_vllm_port_service_link() -> None:
    d = sd.diagnose_log(log("vllm-port.log"), 1)
    assert d is not None
    assert (d.failure_class, d.name) == (18, "vllm-port-service-link")
    assert d.cause.startswith("ValueError: VLLM_PORT 'tcp://10.96.0.12:8000' appears to be a URI")
    assert "'tcp://10.96.0.12:8000'" in d.diagnosis and "Service named `vllm`" in d.diagnosis
    assert "enableServiceLinks: false" in d.fix


def test_other_service_link_named_from_the_containers_env() -> None:
    # `-e VLLM_DP_MASTER_PORT=tcp://10.96.0.13:29500` (a Service named `vllm-dp-master`): vLLM's config validation
    # wraps the int() error, so only the container's environment names the variable.
    text = (
        "Value error, invalid literal for int() with base 10: 'tcp://10.96.0.13:29500' [type=value_error, "
        "input_value=ArgsKwargs(()), input_type=ArgsKwargs]\n"
    )
    env = {"VLLM_DP_MASTER_PORT": "tcp://10.96.0.13:29500", "HOME": "/home/vllm"}
    d = sd.diagnose_log(text, 1, env=env)
    assert d is not None
    assert (d.failure_class, d.name) == (18, "port-service-link")
    assert "VLLM_DP_MASTER_PORT is 'tcp://10.96.0.13:29500', a Kubernetes service link (a Service named " in d.diagnosis
    assert "`vllm-dp-master`" in d.diagnosis and "enableServiceLinks: false" in d.fix
    d = sd.diagnose_log(text, 1)
    assert d is not None and "a vLLM setting is 'tcp://10.96.0.13:29500'" in d.diagnosis


def test_metrics_dir_missing() -> None:
    d = sd.diagnose_log(log("metrics-dir-missing.log"), 1)
    assert d is not None
    assert (d.failure_class, d.name) == (22, "metrics-dir-unusable")
    assert "PROMETHEUS_MULTIPROC_DIR is /tmp/prom-missing, which does not exist" in d.diagnosis
    assert "unset PROMETHEUS_MULTIPROC_DIR" in d.fix


def test_metrics_dir_read_only_is_named_so() -> None:
    line = "PermissionError: [Errno 13] Permission denied: '/metrics/gauge_all_1.db'"
    d = sd.diagnose_log(line, 1)
    assert d is not None and d.failure_class == 22
    assert "/metrics, which is not writable" in d.diagnosis


def test_unknown_failure_keeps_its_own_cause_line() -> None:
    text = (
        "(APIServer pid=1) ERROR 12-01 09:00:00 [x.py:1] ValueError: something new\n"
        "RuntimeError: Engine core initialization failed. See root cause above."
    )
    d = sd.diagnose_log(text, 1)
    assert d is not None
    assert (d.failure_class, d.name, d.cause) == (None, "server-exited", "ValueError: something new")


def test_killed_while_compiling_names_the_phase() -> None:
    # A compiled start's log up to the compile warm-up, then SIGKILL (what the kubelet sends after a failed
    # liveness probe and its grace).
    text = log("killed-while-compiling.log")
    assert sd.start_phase(text) == "compiling the model (torch.compile warm-up)"
    d = sd.diagnose_log(text, 137, seconds=192.4)
    assert d is not None
    assert (d.failure_class, d.name) == (20, "killed-while-starting")
    assert "SIGKILL, exit 137) 192 s after it started, while still compiling the model" in d.diagnosis
    assert "startupProbe" in d.fix and "--start-period" in d.fix
    assert d.cause.endswith("Warming up model for the compilation...")


def test_killed_after_start_is_not_a_probe_failure() -> None:
    text = log("killed-while-compiling.log") + "INFO:     Application startup complete.\n"
    d = sd.diagnose_log(text, 137)
    assert d is not None and d.name == "server-exited" and d.failure_class is None


def test_start_phase_of_an_eager_start_is_not_compiling() -> None:
    # --enforce-eager logs "disabling torch.compile" before the engine starts: not a compile phase.
    text = log("shm-64m.log").splitlines()[0] + (
        "\n(APIServer pid=1) WARNING 12-01 09:33:43 [vllm.py:1703] Enforce eager set, disabling torch.compile, "
        "CUDAGraphs, and JIT kernel warmup.\n"
    )
    assert sd.start_phase(text) == "importing vLLM and resolving the model"


def test_running_or_clean_exit_without_known_cause_is_no_failure() -> None:
    assert sd.diagnose_log("INFO:     Application startup complete.\n", None) is None
    assert sd.diagnose_log("INFO:     Application shutdown complete.\n", 0) is None


@pytest.mark.parametrize(
    ("route", "status", "body", "name"),
    [
        (
            "POST /v1/chat/completions",
            400,
            '{"error":{"message":"As of transformers v4.44, default chat template is no longer allowed, so you must '
            'provide a chat template if the tokenizer does not define one.","type":"BadRequestError","param":null,'
            '"code":400}}',
            "no-chat-template",
        ),
        (
            "POST /v1/completions",
            404,
            '{"error":{"message":"The model `/model` does not exist. Valid aliases: tiny.","type":"NotFoundError",'
            '"param":"model","code":404}}',
            "unknown-model-id",
        ),
    ],
)
def test_client_mismatch(route: str, status: int, body: str, name: str) -> None:
    d = srd.diagnose_route(route, status, body)
    assert d is not None
    assert (d.failure_class, d.name) == (17, name)
    assert d.cause.startswith(("As of transformers", "The model `/model` does not exist"))


def test_unknown_model_names_asked_and_served() -> None:
    body = '{"error":{"message":"The model `/model` does not exist. Valid aliases: tiny.","code":404}}'
    d = srd.diagnose_route("POST /v1/completions", 404, body)
    assert d is not None
    assert "'/model'" in d.diagnosis and "serves 'tiny'" in d.diagnosis and "--served-model-name" in d.fix


def test_chat_template_fix_names_both_ways() -> None:
    body = '{"error":{"message":"default chat template is no longer allowed","code":400}}'
    d = srd.diagnose_route("POST /v1/chat/completions", 400, body)
    assert d is not None and "--chat-template" in d.fix and "tokenizer_config.json" in d.fix


def test_route_of_a_dead_server_is_a_consequence() -> None:
    server = sd.diagnose_log(log("shm-64m.log"), 1)
    assert server is not None
    d = srd.diagnose_route("GET /metrics", None, "", server=server)
    assert d is not None
    assert d.consequence_of is server and d.failure_class == 15
    assert "a consequence of" in d.render() and "160 MiB" in d.render()


def test_metrics_500_from_a_corrupted_multiprocess_file() -> None:
    # PROMETHEUS_MULTIPROC_DIR holding a file cut short: the body carries the message, the log only the access line.
    body = (
        '{"error":{"message":"Read beyond file size detected, file is corrupted.","type":"InternalServerError",'
        '"param":null,"code":500}}'
    )
    access = 'INFO:     172.17.0.1:59134 - "GET /metrics HTTP/1.1" 500 Internal Server Error\n'
    d = srd.diagnose_route("GET /metrics", 500, body, log=access)
    assert d is not None
    assert (d.failure_class, d.name) == (22, "metrics-file-corrupted")
    assert d.cause == "Read beyond file size detected, file is corrupted."
    assert "PROMETHEUS_MULTIPROC_DIR" in d.diagnosis and "wiped before each start" in d.fix


def test_route_500_with_a_web_stack_traceback() -> None:
    # vllm-project/vllm#45596's traceback (fastapi 0.137 with prometheus-fastapi-instrumentator 8.0.0), as uvicorn
    # logs it after the access line.
    text = "\n".join(
        [
            'INFO:     10.0.0.7:38480 - "GET /v1/models HTTP/1.1" 500 Internal Server Error',
            "ERROR:    Exception in ASGI application",
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/prometheus_fastapi_instrumentator/routing.py", line 55, '
            "in _get_route_name",
            "    route_name = route.path",
            "AttributeError: '_IncludedRouter' object has no attribute 'path'",
        ]
    )
    d = srd.diagnose_route("GET /v1/models", 500, "Internal Server Error", log=text)
    assert d is not None
    assert (d.failure_class, d.name) == (16, "fastapi-instrumentator-skew")
    assert d.cause == "AttributeError: '_IncludedRouter' object has no attribute 'path'"
    other = text.replace("AttributeError: '_IncludedRouter' object has no attribute 'path'", "KeyError: 'x'")
    d = srd.diagnose_route("GET /v1/models", 500, "Internal Server Error", log=other)
    assert d is not None and (d.failure_class, d.name, d.cause) == (16, "route-500", "KeyError: 'x'")


def test_answers_below_400_are_no_failure() -> None:
    assert srd.diagnose_route("GET /health", 200, "") is None


def test_metrics_without_route_names() -> None:
    # /metrics of an image built on ours with fastapi 0.163.2 (`pip install -U fastapi`), after 4 requests.
    found = servediag.unlabelled_metrics(log("metrics-handler-none.txt"))
    assert found is not None
    cause, _, fix = found
    assert cause.startswith('http_requests_total{handler="none"')
    assert "fastapi<0.137" in fix and "pip check" in fix
    named = 'http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 1.0\n'
    assert servediag.unlabelled_metrics(named) is None
    assert servediag.unlabelled_metrics("# no requests counted\n") is None


def test_shell_pid1_swallowing_sigterm() -> None:
    d = srd.diagnose_stop(exit_code=137, seconds=10.4, grace=10, pid1=["/bin/sh", "-c", 'vllm "$@"', "vllm", "serve"])
    assert d is not None
    assert (d.failure_class, d.name) == (19, "shell-pid1-swallows-sigterm")
    assert "10 s of a 10 s grace" in d.diagnosis and "exit 137" in d.diagnosis
    assert "exec" in d.fix and "JSON" in d.fix
    assert d.cause == 'PID 1: /bin/sh -c vllm "$@" vllm serve'


def test_stop_within_grace_keeps_the_contract() -> None:
    vllm = ["/opt/venv/bin/python", "/opt/venv/bin/vllm", "serve"]
    assert srd.diagnose_stop(exit_code=0, seconds=0.8, grace=30, pid1=vllm) is None
    assert srd.diagnose_stop(exit_code=143, seconds=2, grace=30, pid1=["vllm"]) is None
    d = srd.diagnose_stop(exit_code=137, seconds=30.2, grace=30, pid1=vllm)
    assert d is not None and d.name == "stop-not-within-grace"


@pytest.mark.parametrize(
    "output",
    [
        "/bin/sh: 1: curl: not found\n",
        'OCI runtime exec failed: exec failed: unable to start container process: exec: "curl": executable file not '
        "found in $PATH: unknown",
    ],
)
def test_healthcheck_binary_missing(output: str) -> None:
    d = srd.diagnose_healthcheck(output, 1)
    assert d is not None
    assert (d.failure_class, d.name) == (20, "healthcheck-binary-missing")
    assert "`curl`" in d.diagnosis and "python3 -c" in d.fix


def test_diagnosis_is_frozen() -> None:
    d = sd.Diagnosis(failure_class=None, name="x", cause="c", diagnosis="d", fix="f")
    with pytest.raises(AttributeError):
        d.name = "y"  # type: ignore[misc]
