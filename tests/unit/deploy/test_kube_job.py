"""The smoke Job (``tools/matrix kube VARIANT --smoke-job``): the profile's Deployment pod running the bundle,
valid against the Kubernetes schemas and, under restricted, PSS restricted; its report read back from a log."""

from __future__ import annotations

import base64
import io
import json
import zipfile
from typing import Any

import pytest

from matrixtool.deploy import kube, kube_checks, kube_job, kube_pod
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.select import select_checks
from matrixtool.smoke import bundle
from matrixtool.smoke.serve import line as serve_line

VARIANTS = {v.name: v for v in load_matrix().variants}


def _docs(variant: str, profile: str, suite: str = "quick") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    v = VARIANTS[variant]
    p = v.profile(profile)
    assert p is not None
    serving = kube.serving_for(v, profile, None, model=serve_line.MODEL_PATH, claim="vllm-models")
    data, deadline = kube_job.bundle_for(v, suite)
    deployment = kube.manifests(
        variant=v.name,
        accelerator=v.accelerator.value,
        profile=profile,
        values=p.values,
        image="img:1",
        serving=serving,
    )
    job = kube_job.smoke_job(
        deployment, variant=v.name, profile=profile, image="img:1", bundle_data=data, deadline_s=deadline
    )
    return job, deployment


@pytest.mark.parametrize("variant", ["cpu", "cuda", "rocm"])
@pytest.mark.parametrize("profile", ["default", "restricted"])
def test_the_job_is_the_profiles_pod_running_the_bundle(variant: str, profile: str) -> None:
    job, deployment = _docs(variant, profile)
    assert kube_checks.validate(job) == []
    if profile == "restricted":
        assert kube_checks.pss_restricted_problems(job) == []
    config_map, job_doc = job[0], job[1]
    assert [d["kind"] for d in job] == ["ConfigMap", "Job"] + (["NetworkPolicy"] * (len(deployment) - 2))
    pod, server_pod = job_doc["spec"]["template"]["spec"], deployment[0]["spec"]["template"]["spec"]
    (container,), (server,) = pod["containers"], server_pod["containers"]
    # The profile's exact pod: its securityContexts, grace, run-condition volumes, env and resources.
    for key in ("securityContext", "terminationGracePeriodSeconds", "enableServiceLinks"):
        assert pod.get(key) == server_pod.get(key), key
    assert container.get("securityContext") == server.get("securityContext")
    profile_volumes = [v for v in server_pod["volumes"] if v["name"] != kube_pod.MODEL_VOLUME]
    assert pod["volumes"][: len(profile_volumes)] == profile_volumes
    assert container["env"][:-1] == server.get("env", [])
    limits = container.get("resources", {}).get("limits", {})
    gpu = kube.GPU_RESOURCES.get(VARIANTS[variant].accelerator.value)
    assert limits == server.get("resources", {}).get("limits", {})
    assert (limits.get(gpu) == 1) if gpu else not ({"nvidia.com/gpu", "amd.com/gpu"} & set(limits))
    # The bundle: read-only from the ConfigMap; the JSON report on stdout; the work folder a memory emptyDir.
    assert container["command"][:4] == ["python3", "/smoke/bundle.pyz", "--json", "-"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/smoke"]["readOnly"] is True and serve_line.MODEL_MOUNT not in mounts
    assert pod["restartPolicy"] == "Never" and job_doc["spec"]["backoffLimit"] == 0
    data = base64.b64decode(config_map["binaryData"][kube_job.BUNDLE_KEY])
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        facts = json.loads(z.read("vllm_smoke/bundle_facts.json"))
    v = VARIANTS[variant]
    assert facts == bundle.facts(v, select_checks(v, (), (), "quick"), "quick")
    assert job_doc["spec"]["activeDeadlineSeconds"] == bundle.deadline_s(facts)


def test_the_report_is_read_from_the_end_of_the_log() -> None:
    doc = {"schema_version": 1, "ok": True, "checks": [{"check": "x", "facts": {"a": {"b": 1}}}]}
    log = "[cpu] x: passed (1.0 s) ok\n\nvariant  profile\n-------\n" + json.dumps(doc, indent=2) + "\n"
    assert kube_job.report_of(log) == doc
    with pytest.raises(ValueError, match="no JSON report"):
        kube_job.report_of("[cpu] x: passed\nKilled\n")
