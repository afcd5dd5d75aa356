"""Kubernetes manifests from deployment profiles (kube.py): every condition has its field, every profile of
matrix.yaml round-trips through its manifest, the manifests validate offline, and restricted is PSS restricted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.core.errors import ExitCode
from matrixtool.deploy import kube, kube_checks, kube_pod
from matrixtool.model.conditions import Condition
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.profiles import Profile
from tests.conftest import REPO_ROOT, copy_checkout

SERVING = kube.Serving(args=("serve", "/models/tiny-llama"), port=8000, model_mount="/models", cold_start_s=98)
VARIANTS = {v.name: v for v in load_matrix().variants}
PROFILES = [(v.name, p) for v in VARIANTS.values() for p in v.profiles]


@pytest.mark.parametrize("cluster", list(kube.Cluster), ids=[c.value for c in kube.Cluster])
@pytest.mark.parametrize(("variant", "profile"), PROFILES, ids=[f"{v}-{p.name}" for v, p in PROFILES])
def test_the_manifest_holds_exactly_the_profile_the_checks_ran_under(
    variant: str, profile: Profile, cluster: kube.Cluster
) -> None:
    values = profile.values
    accelerator = VARIANTS[variant].accelerator.value
    docs = kube.manifests(
        variant=variant,
        accelerator=accelerator,
        profile=profile.name,
        values=values,
        image="i:1",
        serving=SERVING,
        cluster=cluster,
    )
    assert kube_pod.conditions_of(docs) == kube_pod.comparable(values)
    assert kube_checks.validate(docs) == []
    assert list(yaml.safe_load_all(kube_checks.to_yaml(docs))) == docs and "&id" not in kube_checks.to_yaml(docs)
    if cluster is kube.Cluster.OPENSHIFT:
        # conditions_of reads the user back from the annotation: what the SCC assigns is absent from every
        # securityContext, and the annotation is the profile's user, exactly (absent where the profile has none).
        (pod,) = [d["spec"]["template"] for d in docs if d["kind"] == "Deployment"]
        contexts = [pod["spec"].get("securityContext", {})]
        contexts += [c.get("securityContext", {}) for c in pod["spec"]["containers"]]
        assert [sorted(set(kube.SCC_ASSIGNED) & set(sec)) for sec in contexts] == [[] for _ in contexts]
        user = values.get(Condition.USER)
        assert pod["metadata"]["annotations"].get(kube_pod.USER_ANNOTATION) == (None if user is None else str(user))
        # Every profile of matrix.yaml is admitted by OpenShift's default SCC in any namespace.
        assert kube_checks.scc_restricted_v2_problems(docs) == []


def test_restricted_is_pss_restricted_and_default_is_not() -> None:
    profiles = {p.name: p for p in next(v for v in load_matrix().variants if v.name == "cpu").profiles}
    restricted, default = (
        kube.manifests(
            variant="cpu", accelerator="cpu", profile=name, values=profiles[name].values, image="i", serving=SERVING
        )
        for name in ("restricted", "default")
    )
    assert kube_checks.pss_restricted_problems(restricted) == []
    problems = kube_checks.pss_restricted_problems(default)
    assert any("allowPrivilegeEscalation" in p for p in problems) and any("runAsNonRoot" in p for p in problems)
    kinds = [d["kind"] for d in restricted]
    assert kinds == ["Deployment", "Service", "NetworkPolicy"] and [d["kind"] for d in default] == kinds[:2]


@pytest.mark.parametrize(("variant", "profile"), PROFILES, ids=[f"{v}-{p.name}" for v, p in PROFILES])
def test_a_gpu_variants_server_asks_its_device_plugin_for_exactly_one_gpu(variant: str, profile: Profile) -> None:
    """Without the extended resource the NVIDIA/AMD device plugin gives the container no GPU at all."""
    accelerator = VARIANTS[variant].accelerator.value
    docs = kube.manifests(
        variant=variant,
        accelerator=accelerator,
        profile=profile.name,
        values=profile.values,
        image="i",
        serving=SERVING,
    )
    (container,) = docs[0]["spec"]["template"]["spec"]["containers"]
    resources = container.get("resources", {})
    gpus = {k: v for k, v in resources.get("limits", {}).items() if k in {"nvidia.com/gpu", "amd.com/gpu"}}
    expected = {"cuda": {"nvidia.com/gpu": 1}, "rocm": {"amd.com/gpu": 1}}.get(accelerator, {})
    assert gpus == expected
    # No request other than the limit (Kubernetes refuses an extended resource's request that differs from it).
    assert not set(gpus) & set(resources.get("requests", {}))
    assert kube_checks.validate(docs) == []
    if profile.name == "restricted":
        assert kube_checks.pss_restricted_problems(docs) == []
    for cluster in kube.Cluster:
        out = kube_checks.to_yaml(
            kube.manifests(
                variant=variant,
                accelerator=accelerator,
                profile=profile.name,
                values=profile.values,
                image="i",
                serving=SERVING,
                cluster=cluster,
            )
        )
        assert out.count("nvidia.com/gpu: 1") + out.count("amd.com/gpu: 1") == len(expected)


def test_pss_rules_catch_what_they_name() -> None:
    docs = kube.manifests(variant="cpu", accelerator="cpu", profile="x", values={}, image="i", serving=SERVING)
    spec = docs[0]["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    spec["volumes"].append({"name": "h", "hostPath": {"path": "/etc"}})
    spec["containers"][0]["securityContext"] = {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}
    text = "\n".join(kube_checks.pss_restricted_problems(docs))
    for needle in ("hostNetwork", "volume h is hostPath", "privileged", "capabilities add", "drop ALL"):
        assert needle in text, text


def test_the_startup_probe_outlasts_the_measured_cold_start_and_liveness_waits_for_it() -> None:
    probes = kube.probes(SERVING)
    startup = probes["startupProbe"]
    assert startup["failureThreshold"] * startup["periodSeconds"] >= kube.STARTUP_MARGIN * 98
    assert probes["livenessProbe"]["httpGet"]["path"] == "/health"
    short = kube.probes(kube.Serving(args=(), port=1, model_mount="/m", cold_start_s=5))["startupProbe"]
    assert short["failureThreshold"] * short["periodSeconds"] >= kube.MIN_STARTUP_S


def test_no_service_links_so_a_service_named_vllm_injects_no_vllm_port() -> None:
    docs = kube.manifests(variant="cpu", accelerator="cpu", profile="x", values={}, image="i", serving=SERVING)
    assert docs[0]["spec"]["template"]["spec"]["enableServiceLinks"] is False


def test_the_kube_command_writes_valid_manifests_with_the_measured_cold_start(tmp_path: Path) -> None:
    report = tmp_path / "run.json"
    checks = [{"variant": "cpu", "profile": "restricted", "check": "serve", "facts": {"ready_s": 140.0}}]
    report.write_text(json.dumps({"checks": checks}))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["--out", str(out), "kube", "cpu", "--from-report", str(report)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert "cpu.restricted.yaml: Kubernetes 1.33.0 schemas: valid; PSS restricted: ok" in result.output
    assert "allows 420 s (3x 140.0 s, at least 120 s; measured by the serve check under restricted)" in result.output
    assert (
        "allows 2700 s (3x 900.0 s, at least 120 s; the variant's ready_budget)" in result.output
    )  # default: no measurement in the report
    (deployment, *_) = yaml.safe_load_all((out / "kube" / "cpu.restricted.yaml").read_text())
    assert kube_pod.conditions_of([deployment])[Condition.USER] == "1000770000:0"
    bad = CliRunner().invoke(main, ["--out", str(out), "kube", "cpu", "--profile", "nope"])
    assert bad.exit_code == ExitCode.CONFIG and "unknown profile(s) 'nope'" in bad.output


def test_the_compile_cache_volume_is_mounted_at_the_images_cache_root(tmp_path: Path) -> None:
    report = tmp_path / "run.json"
    facts = {"ready_s": 140.0, "warm": {"ready_s": 61.0}}
    report.write_text(
        json.dumps({"checks": [{"variant": "cpu", "profile": "restricted", "check": "serve", "facts": facts}]})
    )
    out = tmp_path / "out"
    args = ["--out", str(out), "kube", "cpu", "--profile", "restricted", "--from-report", str(report)]
    for extra, volume in (
        ([], {"emptyDir": {}}),
        (["--cache-claim", "vllm-cache"], {"persistentVolumeClaim": {"claimName": "vllm-cache"}}),
    ):
        result = CliRunner().invoke(main, [*args, *extra], catch_exceptions=False)
        assert result.exit_code == 0 and "PSS restricted: ok" in result.output, result.output
        (deployment, *_) = yaml.safe_load_all((out / "kube" / "cpu.restricted.yaml").read_text())
        pod = deployment["spec"]["template"]
        (cache,) = [v for v in pod["spec"]["volumes"] if v["name"] == kube_pod.CACHE_VOLUME]
        assert cache == {"name": kube_pod.CACHE_VOLUME, **volume}
        mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        # Above restricted's tmpfs /tmp: the cache is on the volume, /tmp's other files on the memory emptyDir.
        assert mounts[kube_pod.CACHE_VOLUME] == "/tmp/.cache" and mounts["tmpfs-tmp"] == "/tmp"
        # The startupProbe follows the cold figure (a new pod on an emptyDir is cold); the warm one is recorded.
        assert pod["spec"]["containers"][0]["startupProbe"]["failureThreshold"] == 84  # 3 x 140 s / 5 s
        assert pod["metadata"]["annotations"]["io.vllm-matrix/warm-start"] == "61s (measured by the serve check)"
        pod_sec = pod["spec"]["securityContext"]
        # Plain Kubernetes: the claim is group-owned by the pod's GID, 0 (PSS restricted has no rule on groups).
        assert pod_sec.get("fsGroup") == (pod_sec["runAsGroup"] if extra else None) and pod_sec["runAsGroup"] == 0
        # The cache volume is no run condition: the profile read back is the profile.
        assert kube_pod.conditions_of([deployment])[Condition.TMPFS] == {"/tmp": "size=4g"}


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--image", "x y"], "--image 'x y' holds ' '"),
        (["--model-claim", "Bad_Claim"], "--model-claim 'Bad_Claim' is not a PersistentVolumeClaim name"),
        (["--model", "relative/model"], "--model 'relative/model': give the model's absolute path"),
        (["--model", "/m/x"], "--model '/m/x' is not a folder on the model claim, which is mounted at /models"),
        (["--model", "/models/../etc"], "--model '/models/../etc' is not a folder on the model claim"),
        (["--model", "/models/"], "--model '/models/' is not a folder on the model claim"),
        (["--profile", "nope"], "unknown profile(s) 'nope'"),
        (["--cache-claim", "Cache!"], "--cache-claim 'Cache!' is not a PersistentVolumeClaim name"),
        (["--cache-claim", "vllm-models"], "--cache-claim 'vllm-models' is the model's claim"),
    ],
)
def test_kube_flags_are_checked_before_anything_is_written(tmp_path: Path, flags: list[str], says: str) -> None:
    result = CliRunner().invoke(main, ["--out", str(tmp_path), "kube", "cpu", *flags])
    assert result.exit_code == ExitCode.CONFIG and says in result.output and not (tmp_path / "kube").exists()


@pytest.mark.parametrize(
    ("ready_s", "says"),
    [
        ("NaN", "ready_s nan is not a time to ready"),
        ("Infinity", "ready_s inf is not a time to ready"),
        ("1e308", "ready_s 1e+308 is not a time to ready"),
        ("-5", "ready_s -5 is not a time to ready"),
        ('"abc"', "ready_s 'abc' is not a number of seconds"),
        ("true", "ready_s True is not a number of seconds"),
        ("1" + "0" * 400, "is not a time to ready"),
        (None, "checks[0]: 'profile' is a required property"),
    ],
)
def test_a_report_that_gives_no_time_to_ready_is_refused_before_anything_is_written(
    tmp_path: Path, ready_s: str | None, says: str
) -> None:
    check = '"variant": "cpu", "check": "serve", "facts": {"ready_s": 1}'
    if ready_s is not None:
        check = f'"variant": "cpu", "profile": "default", "check": "serve", "facts": {{"ready_s": {ready_s}}}'
    report = tmp_path / "run.json"
    report.write_text(f'{{"checks": [{{{check}}}]}}')  # json.dumps cannot write NaN as a report might hold it
    result = CliRunner().invoke(main, ["--out", str(tmp_path), "kube", "cpu", "--from-report", str(report)])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert says in result.output and not (tmp_path / "kube").exists(), result.output


@pytest.mark.parametrize(
    ("checks", "code"),
    [
        ('[{"variant": "cpu", "profile": "default", "check": "serve", "facts": [1]}]', ExitCode.CONFIG),
        ("[1]", ExitCode.CONFIG),
    ],
)
def test_a_report_of_another_shape_is_refused(tmp_path: Path, checks: str, code: int) -> None:
    """Facts or checks that are no objects are no report (exit 3, not exit 1)."""
    report = tmp_path / "run.json"
    report.write_text(f'{{"checks": {checks}}}')
    result = CliRunner().invoke(main, ["--out", str(tmp_path), "kube", "cpu", "--from-report", str(report)])
    assert result.exit_code == code, result.output


def test_a_claim_name_is_a_dns_subdomain_and_a_short_cold_start_shows_the_floor() -> None:
    """PersistentVolumeClaim names are DNS-1123 subdomains (dots, up to 253 characters); the probe's window
    below MIN_STARTUP_S is the floor, not 3x the measurement."""
    assert kube.flag_problems(model="/models/m", claim="vllm-models", cache_claim="team.cache-1") == []
    assert kube.flag_problems(model="/models/m", claim="a" * 253) == []
    assert kube.flag_problems(model="/models/m", claim="a" * 254)
    assert kube.flag_problems(model="/models/m", claim="a..b")
    assert kube.startup_window_s(10.0) == kube.MIN_STARTUP_S and kube.startup_window_s(140.0) == 420.0


@pytest.mark.parametrize("smoke_job", [False, True])
def test_for_openshift_the_scc_assigns_uid_gid_and_fsgroup_and_the_profile_is_kept(
    tmp_path: Path, smoke_job: bool
) -> None:
    """restricted-v2 takes runAsUser and fsGroup from the namespace's ranges and refuses others (fsGroup 0, the UID
    1000770000 of a namespace whose range lacks it): the OpenShift manifest sets neither, nor runAsGroup (the
    arbitrary UID runs in group 0), keeps runAsNonRoot and the claim's fsGroupChangePolicy, and the profile's
    user as an annotation; it stays valid and PSS restricted; plain Kubernetes keeps the profile's IDs."""
    out = tmp_path / "out"
    args = ["--out", str(out), "kube", "cpu", "--profile", "restricted", "--cache-claim", "vllm-cache"]
    args += ["--smoke-job"] if smoke_job else []
    name = "cpu.restricted.smoke-job.yaml" if smoke_job else "cpu.restricted.yaml"
    result = CliRunner().invoke(main, [*args, "--cluster", "openshift"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "PSS restricted: ok; OpenShift restricted-v2 SCC: ok" in result.output
    docs = list(yaml.safe_load_all((out / "kube" / name).read_text()))
    (pod,) = [d["spec"]["template"] for d in docs if d["kind"] in ("Deployment", "Job")]
    pod_sec = pod["spec"]["securityContext"]
    assert not set(kube.SCC_ASSIGNED) & set(pod_sec), pod_sec
    assert pod_sec["runAsNonRoot"] is True and pod_sec["fsGroupChangePolicy"] == "OnRootMismatch"
    assert pod["metadata"]["annotations"][kube_pod.USER_ANNOTATION] == "1000770000:0"
    assert kube_checks.validate(docs) == [] and kube_checks.pss_restricted_problems(docs) == []
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0 and "OpenShift" not in result.output, result.output
    docs = list(yaml.safe_load_all((out / "kube" / name).read_text()))
    (pod,) = [d["spec"]["template"] for d in docs if d["kind"] in ("Deployment", "Job")]
    assert {k: pod["spec"]["securityContext"][k] for k in kube.SCC_ASSIGNED} == {
        "runAsUser": 1000770000,
        "runAsGroup": 0,
        "fsGroup": 0,
    }
    assert kube_pod.USER_ANNOTATION not in pod["metadata"]["annotations"]
    bad = CliRunner().invoke(main, [*args, "--cluster", "okd"])
    assert bad.exit_code == 2 and "'okd' is not one of 'kubernetes', 'openshift'" in bad.output, bad.output


def test_scc_rules_catch_what_they_name() -> None:
    docs = kube.manifests(variant="cpu", accelerator="cpu", profile="x", values={}, image="i", serving=SERVING)
    assert kube_checks.scc_restricted_v2_problems(docs) == []  # the SCC defaults what is left unset
    spec = docs[0]["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    spec["volumes"].append({"name": "h", "hostPath": {"path": "/etc"}})
    spec["securityContext"] = {"runAsUser": 1000, "fsGroup": 0, "seccompProfile": {"type": "Unconfined"}}
    spec["containers"][0]["securityContext"] = {
        "privileged": True,
        "allowPrivilegeEscalation": True,
        "capabilities": {"add": ["NET_BIND_SERVICE", "SYS_PTRACE"]},
        "seLinuxOptions": {"level": "s0:c1,c2"},
    }
    text = "\n".join(kube_checks.scc_restricted_v2_problems(docs))
    for needle in (
        "hostNetwork is true",
        "volume h is hostPath",
        "securityContext.runAsUser is set",
        "securityContext.fsGroup is set",
        "container vllm: securityContext.seLinuxOptions is set",
        "privileged",
        "allowPrivilegeEscalation is true",
        "capabilities add ['SYS_PTRACE']",
        "seccompProfile.type Unconfined",
    ):
        assert needle in text, text


ROOT_REFUSED = (
    "runs as root; restricted-v2 assigns a non-root UID from the namespace range, so the conditions the checks "
    "passed under are not what runs; run the checks under a non-root profile, or grant the anyuid SCC"
)


@pytest.mark.parametrize("user", ["0", "0:0", "0:1000"])
def test_a_root_profile_is_refused_by_restricted_v2_which_runs_another_uid(user: str) -> None:
    docs = kube.manifests(
        variant="cpu",
        accelerator="cpu",
        profile="root",
        values={Condition.USER: user},
        image="i",
        serving=SERVING,
        cluster=kube.Cluster.OPENSHIFT,
    )
    assert kube_checks.scc_restricted_v2_problems(docs) == [f"Deployment vllm-cpu-root: {ROOT_REFUSED}"]
    # A non-root UID, and a profile without user (the image's 1000:0), are admitted.
    for values in ({Condition.USER: "1000:0"}, {}):
        docs = kube.manifests(
            variant="cpu",
            accelerator="cpu",
            profile="x",
            values=values,
            image="i",
            serving=SERVING,
            cluster=kube.Cluster.OPENSHIFT,
        )
        assert kube_checks.scc_restricted_v2_problems(docs) == []
    # runAsUser 0 written into a manifest (a plain Kubernetes one judged for OpenShift) is root as well.
    docs = kube.manifests(
        variant="cpu", accelerator="cpu", profile="root", values={Condition.USER: "0"}, image="i", serving=SERVING
    )
    problems = kube_checks.scc_restricted_v2_problems(docs)
    assert f"Deployment vllm-cpu-root: {ROOT_REFUSED}" in problems, problems


def test_kube_for_openshift_reports_a_root_profile_refused(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["profiles"]["root"] = {"user": "0", "shm_size": "1g"}
    matrix = copy_checkout(tmp_path / "checkout", yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "out"
    args = ["--matrix", str(matrix), "--out", str(out), "kube", "cpu", "--profile", "root", "--cluster", "openshift"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "OpenShift restricted-v2 SCC: refused (Deployment vllm-cpu-root: runs as root;" in result.output
    assert "OpenShift restricted-v2 SCC: ok" not in result.output


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_an_unwritable_later_manifest_leaves_the_earlier_ones_unchanged(tmp_path: Path, kind: str) -> None:
    """cpu.restricted.yaml is written after cpu.default.yaml: a folder there (EISDIR) or a FIFO (a write would wait
    for a reader) refuses the whole set, naming it, before cpu.default.yaml is replaced."""
    kube_dir = tmp_path / "kube"
    kube_dir.mkdir()
    earlier, later = kube_dir / "cpu.default.yaml", kube_dir / "cpu.restricted.yaml"
    earlier.write_text("old\n")
    if kind == "folder":
        later.mkdir()
    else:
        os.mkfifo(later)
    result = CliRunner().invoke(main, ["--out", str(tmp_path), "kube", "cpu"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"{later} is a {'folder' if kind == 'folder' else 'FIFO'}, not a regular file" in result.output
    assert earlier.read_text() == "old\n" and sorted(p.name for p in kube_dir.iterdir()) == sorted(
        [earlier.name, later.name]
    )


@pytest.mark.parametrize(
    ("warm", "says"),
    [
        ('"fast"', "warm 'fast' is not an object"),
        ("[61]", "warm [61] is not an object"),
        ('{"ready_s": "61"}', "warm.ready_s '61' is not a number of seconds"),
        ('{"ready_s": true}', "warm.ready_s True is not a number of seconds"),
        ('{"ready_s": -1}', "warm.ready_s -1 is not a time to ready"),
        ('{"ready_s": NaN}', "warm.ready_s nan is not a time to ready"),
        ('{"ready_s": 1e308}', "warm.ready_s 1e+308 is not a time to ready"),
    ],
)
def test_a_malformed_warm_start_is_refused_like_a_malformed_cold_one(tmp_path: Path, warm: str, says: str) -> None:
    report = tmp_path / "run.json"
    facts = f'{{"ready_s": 140, "warm": {warm}}}'
    report.write_text(f'{{"checks": [{{"variant": "cpu", "profile": "default", "check": "serve", "facts": {facts}}}]}}')
    result = CliRunner().invoke(main, ["--out", str(tmp_path), "kube", "cpu", "--from-report", str(report)])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"serve of cpu/default: {says}" in result.output and not (tmp_path / "kube").exists(), result.output


@pytest.mark.parametrize("warm", ['{"skipped": "the profile has no cache volume"}', '{"ready_s": null}', "null"])
def test_a_warm_start_that_gave_no_figure_is_no_annotation(tmp_path: Path, warm: str) -> None:
    """Skipped, or never ready: the report is valid, the manifest has no warm-start annotation."""
    report = tmp_path / "run.json"
    facts = f'{{"ready_s": 140, "warm": {warm}}}'
    report.write_text(f'{{"checks": [{{"variant": "cpu", "profile": "default", "check": "serve", "facts": {facts}}}]}}')
    args = ["--out", str(tmp_path), "kube", "cpu", "--profile", "default", "--from-report", str(report)]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (deployment, *_) = yaml.safe_load_all((tmp_path / "kube" / "cpu.default.yaml").read_text())
    assert "io.vllm-matrix/warm-start" not in deployment["spec"]["template"]["metadata"]["annotations"]


@pytest.mark.parametrize("cold_start_s", [98, 900])
@pytest.mark.parametrize("given", [None, "3600"])
def test_vllms_engine_ready_timeout_outlasts_the_startup_probe_unless_the_profile_sets_it(
    cold_start_s: float, given: str | None
) -> None:
    """Class 41: a cold start the startupProbe allows is not ended first by vLLM's own 600 s (vllm#48031)."""
    values = {Condition.ENV: {"VLLM_ENGINE_READY_TIMEOUT_S": given}} if given else {}
    serving = kube.Serving(args=(), port=8000, model_mount="/models", cold_start_s=cold_start_s)
    docs = kube.manifests(variant="cpu", accelerator="cpu", profile="x", values=values, image="i", serving=serving)
    pod = docs[0]["spec"]["template"]
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env", [])}
    window = kube.startup_window_s(cold_start_s)
    expected = given or (str(int(window)) if window > 600 else None)
    assert env.get("VLLM_ENGINE_READY_TIMEOUT_S") == expected
    added = pod["metadata"]["annotations"].get(kube_pod.ENV_ADDED_ANNOTATION)
    assert added == ("VLLM_ENGINE_READY_TIMEOUT_S" if expected and not given else None)
    assert kube_pod.conditions_of(docs) == kube_pod.comparable(values)  # the added variable is no condition
    # What no Pod field sets is said where the pod is: the open-files limit comes from the container runtime.
    assert "container runtime" in pod["metadata"]["annotations"][kube.NOFILE_ANNOTATION]
