"""Deployment profiles: the model, merging, container kwargs, selection, the platform gate (no engine)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import yaml
from click.testing import CliRunner

from matrixtool import report
from matrixtool.cli import main
from matrixtool.core import container
from matrixtool.core.errors import ConfigError, ExitCode, WrongPlatformError
from matrixtool.model import profiles
from matrixtool.model.checks import CHECKS
from matrixtool.model.conditions import Condition
from matrixtool.model.matrixfile import load_matrix, validate
from matrixtool.model.model import CheckSpec
from matrixtool.model.profiles import Overrides, Profile
from matrixtool.report import RunReport
from matrixtool.smoke import executor as smoke
from matrixtool.smoke import plan as smoke_plan
from matrixtool.smoke import result as smoke_result
from matrixtool.smoke import runners as smoke_runners
from tests.conftest import FIXTURE_MATRIX as FIXTURE
from tests.conftest import copy_checkout
from tests.unit._incontainer import incontainer, stub_check

RESTRICTED = {
    "user": "1000770000:0",
    "read_only": True,
    "tmpfs": {"/tmp": "rw,exec,size=4g"},
    "network": "none",
}


def test_shared_profiles_merge_with_variant_overrides() -> None:
    shared = {"default": {}, "restricted": RESTRICTED}
    variant = {
        "restricted": {"memory": "8g", "tmpfs": {"/var/cache": "rw", "/tmp": None}, "network": None},
        "small": {"cpus": 1.5, "env": {"OMP_NUM_THREADS": "1"}},
    }
    default, restricted, small = profiles.merge_profiles(shared, variant)
    assert default == Profile(name="default")
    assert restricted.user == "1000770000:0" and restricted.read_only is True
    assert restricted.memory == "8g" and restricted.network is None  # null resets to the engine's default
    assert dict(restricted.tmpfs) == {"/var/cache": "rw"}  # merged by mount point; null removed /tmp
    assert small.cpus == 1.5 and dict(small.env) == {"OMP_NUM_THREADS": "1"}
    # A variant without overrides gets the shared profiles unchanged; `default` always exists and comes first.
    assert [p.name for p in profiles.merge_profiles({"restricted": RESTRICTED}, {})] == ["default", "restricted"]


def test_container_kwargs_put_each_condition_in_place() -> None:
    profile = profiles.profile_from_mapping("p", {**RESTRICTED, "memory": "2g", "cpus": 1.5, "env": {"A": "1"}})
    assert profiles.container_kwargs(profile) == {
        "user": "1000770000:0",
        "read_only": True,
        "tmpfs": {"/tmp": "rw,exec,size=4g"},
        "mem_limit": "2g",
        "nano_cpus": 1_500_000_000,
        "network_mode": "none",
        "environment": {"A": "1"},
    }
    assert profiles.container_kwargs(Profile(name="default")) == {}


def test_smoke_container_kwargs_keep_labels_and_add_the_smoke_tmpfs() -> None:
    profile = profiles.profile_from_mapping("restricted", RESTRICTED)
    kwargs = smoke_runners.container_kwargs("img:tag", "s1", profile=profile)
    assert kwargs["labels"][container.SESSION_LABEL] == "s1" and container.OWNER_LABEL in kwargs["labels"]
    assert kwargs["tmpfs"] == {"/tmp": "rw,exec,size=4g", smoke_runners.SMOKE_DIR: smoke_runners.SMOKE_TMPFS}
    assert kwargs["environment"] == {"MATRIX_SMOKE_DIR": smoke_runners.SMOKE_DIR}
    assert kwargs["read_only"] is True and kwargs["user"] == "1000770000:0" and kwargs["network_mode"] == "none"
    assert kwargs["init"] is True and kwargs["entrypoint"] == ["sleep"]


def test_overrides_change_one_condition() -> None:
    restricted = profiles.profile_from_mapping("restricted", RESTRICTED)
    changed = Overrides.of(read_only=False, tmpfs={"/tmp": "rw"}, env={"X": "1"}).apply(restricted)
    assert changed.read_only is False and dict(changed.tmpfs) == {"/tmp": "rw"} and dict(changed.env) == {"X": "1"}
    assert changed.user == restricted.user and changed.network == "none" and changed.name == "restricted"
    assert Overrides().apply(restricted) == restricted


def test_a_profile_runs_only_the_checks_its_conditions_can_change() -> None:
    checks = [CheckSpec(name=n, timeout=1) for n in CHECKS]
    affects = {n: frozenset(map(Condition, c.affected_by)) for n, c in CHECKS.items()}
    default = Profile(name="default")
    restricted = profiles.profile_from_mapping("restricted", RESTRICTED)
    assert restricted.differs(default) == {Condition.USER, Condition.READ_ONLY, Condition.TMPFS, Condition.NETWORK}
    run, left = profiles.checks_to_run(restricted, default, checks, affects)
    assert [c.name for c in run] == ["run-conditions", "inductor-compile", "offline-generate", "serve"]
    assert {c.name for c in left} >= {"pip-check", "model-runner", "vllm-cli", "cpu-engine-settings"}
    memory = profiles.profile_from_mapping("small", {"memory": "2g"})
    assert [c.name for c in profiles.checks_to_run(memory, default, checks, affects)[0]] == [
        "run-conditions",
        "offline-generate",
        "serve",
        "cpu-engine-settings",
    ]
    # Alone (no `default` in the same run) a profile runs every check, and `default` always does.
    assert profiles.checks_to_run(restricted, None, checks, affects) == (checks, [])
    assert profiles.checks_to_run(default, default, checks, affects) == (checks, [])


def test_matrix_yaml_declares_default_and_restricted_for_every_variant() -> None:
    for variant in load_matrix().variants:
        names = [p.name for p in variant.profiles]
        assert names[:2] == ["default", "restricted"], variant.name
        restricted = variant.profile("restricted")
        assert restricted is not None and restricted.read_only and restricted.network == "none"
        assert restricted.user is not None and restricted.user.endswith(":0")  # arbitrary UID, GID 0
        assert "exec" in restricted.tmpfs["/tmp"].split(","), "Docker's tmpfs default is noexec (pytorch#91005)"
        assert "run-conditions" in [c.name for c in variant.checks], variant.name


def test_bad_profile_keys_are_config_errors(tmp_path: Path) -> None:
    data = yaml.safe_load(FIXTURE.read_text())
    data["profiles"]["restricted"]["read_olny"] = True
    data["variants"]["cpu"]["profiles"] = {"restricted": {"memory": "lots"}}
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    text = "\n".join(info.value.problems)
    assert "profiles.restricted.read_olny: unknown key; did you mean 'read_only'?" in text
    assert "variants.cpu.profiles.restricted.memory" in text


def test_unknown_profile_is_a_usage_error_naming_the_known_ones() -> None:
    choice = profiles.ProfileChoice(names=("restrcted",))
    with pytest.raises(ConfigError, match=r"unknown profile.*restrcted.*known: default, restricted"):
        choice.resolve("cpu", load_matrix(FIXTURE).variants[0].profiles)


def test_report_has_a_profile_column(tmp_path: Path) -> None:
    results = [
        smoke_result.CheckResult(
            variant="cpu",
            image="i",
            check="inductor-compile",
            status=smoke_result.Status.PASSED,
            diagnosis="ok",
            hint="",
            seconds=1.0,
            profile=p,
        )
        for p in ("default", "restricted")
    ]
    run = report.RunReport(checks=results)
    text = report.table(run)
    assert "profile" in text.splitlines()[0] and "restricted" in text
    assert [c["profile"] for c in report.to_json(run)["checks"]] == ["default", "restricted"]
    report.write_junit(run, tmp_path / "j.xml")
    xml = (tmp_path / "j.xml").read_text()
    assert 'classname="smoke.cpu"' in xml and 'classname="smoke.cpu.restricted"' in xml


class _FakeImages:
    def __init__(self, attrs: dict[str, Any]) -> None:
        self.attrs = attrs

    def get(self, ref: str) -> Any:
        return self


class _FakeClient:
    def __init__(self, attrs: dict[str, Any]) -> None:
        self.images = _FakeImages(attrs)
        self.started: list[dict[str, Any]] = []

        outer = self

        class Containers:
            def run(self, **kwargs: Any) -> Any:
                outer.started.append(kwargs)
                raise docker.errors.APIError("OCI runtime create failed: exec format error")

            def list(self, all: bool, filters: dict[str, str]) -> list[Any]:
                return []  # the failed start's sweep: nothing was created

        self.containers = Containers()


def test_wrong_platform_is_rejected_before_any_container_starts(tmp_path: Path) -> None:
    arm64 = next(v for v in load_matrix(FIXTURE).variants if v.name == "arm64")
    client = _FakeClient({"Os": "linux", "Architecture": "amd64", "Config": {}})
    checks = [CheckSpec(name="triton-import", timeout=5)]
    with pytest.raises(WrongPlatformError, match="is linux/amd64, but variant arm64 is built for linux/arm64"):
        runs = smoke_plan.plan_profiles(arm64, checks, [Profile(name="default")])
        smoke.run_profiles(client, "img", arm64, runs, log_dir=tmp_path)  # type: ignore[arg-type]
    assert client.started == []
    assert WrongPlatformError.exit_code is ExitCode.WRONG_PLATFORM and int(ExitCode.WRONG_PLATFORM) == 12
    assert smoke_plan.platform_matches("linux/arm64/v8", ["linux/arm64"])


def test_exec_format_error_is_named(tmp_path: Path) -> None:
    arm64 = next(v for v in load_matrix(FIXTURE).variants if v.name == "arm64")
    client = _FakeClient({"Os": "linux", "Architecture": "arm64", "Variant": "v8", "Config": {}})
    with pytest.raises(WrongPlatformError, match="exec format error"):
        runs = smoke_plan.plan_profiles(arm64, [CheckSpec(name="triton-import", timeout=5)], [Profile(name="default")])
        smoke.run_profiles(client, "img", arm64, runs, log_dir=tmp_path)  # type: ignore[arg-type]
    status, diagnosis, hint, _ = smoke_result.verdict("vllm-cli", 126, "exec /usr/bin/timeout: exec format error", 10)
    assert status is smoke_result.Status.FAILED and diagnosis.startswith("exec format error") and "binfmt" in hint


def test_cli_profile_flags_reach_the_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_run(args: Any) -> RunReport:
        seen["choice"] = args.choice
        return RunReport()

    monkeypatch.setattr("matrixtool.commands.test.run", fake_run)
    args = ["test", "--image", "x", "--as", "cpu", "--profile", "restricted", "--no-read-only", "--memory", "2g"]
    args += ["--cpus", "1", "--tmpfs", "/tmp:rw", "--env", "A=1", "--user", "1:0", "--network", "bridge"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    choice = seen["choice"]
    assert choice.names == ("restricted",)
    assert choice.overrides == Overrides.of(
        user="1:0", read_only=False, tmpfs={"/tmp": "rw"}, memory="2g", cpus=1.0, network="bridge", env={"A": "1"}
    )
    bad = CliRunner().invoke(main, ["test", "--image", "x", "--as", "cpu", "--env", "A"], catch_exceptions=False)
    assert bad.exit_code == ExitCode.CONFIG and "--env 'A': write KEY=VALUE" in bad.output


_incontainer = incontainer


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("KeyError: 'getpwuid(): uid not found: 1000770000'", "arbitrary UID"),  # pytorch/pytorch#140765
        ("FileNotFoundError: [Errno 2] No usable temporary directory found in ['/tmp', '/var/tmp']", "read-only"),
        ("OSError: /tmp/torchinductor_x/ab.so: failed to map segment from shared object", "noexec"),  # pytorch#91005
        ("OSError: [Errno 30] Read-only file system: '/home/vllm/.cache'", "read-only root"),
        ("Failed to resolve 'huggingface.co' ([Errno -3] Temporary failure in name resolution)", "no network"),
    ],
)
def test_condition_errors_are_explained_with_a_fix(text: str, names: str) -> None:
    found = _incontainer().explain(text)
    assert found is not None and names in found[0] and found[1]


def test_a_failed_check_names_the_condition_it_met(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = _incontainer()
    stub_check(
        monkeypatch,
        "triton-import",
        lambda params: mod.result(
            "failed", "import torch fails: FileNotFoundError: [Errno 2] No usable temporary directory found in ['/tmp']"
        ),
    )
    mod.main(["x", "run", "triton-import", json.dumps({})])
    parsed = smoke_result.parse_output(capsys.readouterr().out)
    assert parsed is not None and "[run condition: read-only root filesystem" in parsed["diagnosis"]
    assert "tmpfs on /tmp" in parsed["hint"]


def test_host_mode_refuses_profiles() -> None:
    result = CliRunner().invoke(main, ["test", "--host", "--as", "cpu", "--read-only"], catch_exceptions=False)
    assert result.exit_code == ExitCode.USAGE and "need --image" in result.output


def test_eagain_is_the_pids_limit_only_where_one_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    # `test --image ... --pids-limit 40 --only offline-generate` failed with this line and no condition named.
    text = "RuntimeError: eager generate fails: RuntimeError: Resource temporarily unavailable"
    conditions = importlib.import_module("matrixtool.incontainer.vllm_smoke.conditions")
    monkeypatch.setattr(conditions, "pod_conditions", lambda: {"pids_max": 40})
    found = conditions.explain(text)
    assert found is not None and found[0].startswith("the container's pids limit (40 ") and "--pids-limit" in found[1]
    monkeypatch.setattr(conditions, "pod_conditions", lambda: {"pids_max": None})
    assert conditions.explain(text) is None


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("user", "0:0", "'0:0'"),
        ("user", "0", "'0'"),
        ("user", None, "not set"),
        ("no_new_privileges", False, "not set"),
        ("cap_drop", ["NET_RAW"], "('NET_RAW',)"),
        ("seccomp", "Unconfined", "'Unconfined'"),
        ("network", "host", "'host'"),
    ],
)
def test_a_restricted_profile_that_breaks_its_promise_is_refused_at_load(
    tmp_path: Path, key: str, value: Any, shown: str
) -> None:
    """A profile named restricted that ran as root loaded and rendered, then ``kube`` exited 1 (its PSS check)."""
    data = yaml.safe_load(FIXTURE.read_text())
    data["profiles"]["restricted"][key] = value
    path = copy_checkout(tmp_path / "checkout", yaml.safe_dump(data, sort_keys=False))
    result = CliRunner().invoke(main, ["--matrix", str(path), "render"])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"profiles.restricted.{key}: {shown}, which a profile named 'restricted' cannot have" in result.output
    assert "or rename the profile" in result.output and "Traceback" not in result.output


def test_a_variants_own_profile_is_named_where_it_breaks_the_promise() -> None:
    data = yaml.safe_load(FIXTURE.read_text())
    data["variants"]["cuda"]["profiles"] = {"restricted": {"user": "0:0"}}
    (problem,) = validate(data)
    assert problem.startswith("variants.cuda.profiles.restricted.user: '0:0', which a profile named 'restricted'")
    data["variants"]["cuda"]["profiles"] = {"lab": {"user": "0:0"}}  # another name promises nothing
    assert validate(data) == []


_RESTRICTED_VALUES = [
    ("user", "0:0"),
    ("user", "1000:0"),
    ("user", None),
    ("no_new_privileges", False),
    ("cap_drop", ["NET_RAW"]),
    ("cap_drop", ["ALL", "NET_RAW"]),
    ("seccomp", "Unconfined"),
    ("seccomp", None),
    ("network", "host"),
    ("network", "bridge"),
    ("network", None),
    ("read_only", False),
    ("tmpfs", {"/tmp": "rw,noexec,size=50%"}),
    ("pids_limit", None),
    ("shm_size", "64m"),
]


@pytest.mark.parametrize(("key", "value"), _RESTRICTED_VALUES)
def test_a_restricted_profile_the_matrix_accepts_is_one_kube_finds_restricted(
    tmp_path: Path, key: str, value: Any
) -> None:
    """The class of the root ``restricted`` profile: no value of a profile so named passes the load and then fails
    ``kube``'s Pod Security check (exit 1, "a bug of this tool"); it is refused at load (exit 3) or its manifests
    are admitted."""
    data = yaml.safe_load(FIXTURE.read_text())
    data["profiles"]["restricted"][key] = value
    path = copy_checkout(tmp_path / "checkout", yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["--matrix", str(path), "--out", str(out), "kube", "cpu"])
    assert result.exit_code in (0, ExitCode.CONFIG), result.output
    assert (result.exit_code == ExitCode.CONFIG) == bool(validate(data)), result.output
