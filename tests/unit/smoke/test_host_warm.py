"""The warm start of the bundle's host serve (``vllm_smoke.serving``): the fresh cache folder and its layout, why a
warm start is skipped, a cache root that cannot be written (class 31), the warm server's start and stop as a real
process group, and the judgement of vLLM's compile-cache lines as vLLM prints them on CUDA.

The CUDA lines below are not captured here (this machine has no GPU): they are vLLM's own wordings
(vllm/compilation/backends.py, decorators.py, monitor.py) as public logs of vLLM on CUDA print them, with this
run's cache folder in the paths. On a warm start Dynamo traces again ("Dynamo bytecode transform time") before
vLLM loads its compiled graphs and its AOT artifact from the cache; the Triton kernels are ``*.cubin``."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from matrixtool.incontainer.vllm_smoke import cachelog, servecache, server, serving
from matrixtool.incontainer.vllm_smoke import compilecache as cc
from matrixtool.model.checks import CHECKS
from matrixtool.model.matrixfile import load_matrix
from matrixtool.smoke import bundle
from matrixtool.smoke.plan import KILL_GRACE
from matrixtool.smoke.serve import check as serve_check
from tests.unit.smoke.test_bundle import GOOD_STOP, SPEC, _probes
from tests.unit.smoke.test_compile_cache import AFTER_COLD, AFTER_WARM, COLD, WARM

CPU = next(v for v in load_matrix().variants if v.name == "cpu")
ROOT = "/root/.cache/vllm-smoke-cache-k2j4f9"
KEY = "8eb57c07a0cb28e25c05fe4f6a26f79c17d1dbab45c8135a7f283823486c9a3d"
TCC = f"{ROOT}/vllm/torch_compile_cache"


def _log(*lines: str) -> str:
    return "\n".join(f"(EngineCore_DP0 pid=2310) INFO 12-01 20:41:05 [backends.py:913] {x}" for x in lines)


CUDA_COLD = _log(
    f"Using cache directory: {TCC}/3a332b42ba/rank_0_0/backbone for vLLM's torch.compile",
    "Dynamo bytecode transform time: 1.84 s",
    "Compiling a graph for compile range (1, 2048) takes 13.71 s",
    f"saved AOT compiled function to {TCC}/torch_aot_compile/{KEY}/rank_0_0/model",
    "torch.compile took 16.02 s in total",
)
CUDA_WARM = _log(
    f"Using cache directory: {TCC}/3a332b42ba/rank_0_0/backbone for vLLM's torch.compile",
    "Dynamo bytecode transform time: 1.79 s",
    "Directly load the compiled graph(s) for compile range (1, 2048) from the cache, took 0.961 s",
    f"Directly load AOT compilation from path {TCC}/torch_aot_compile/{KEY}/rank_0_0/model",
    "torch.compile took 3.37 s in total",
)
# An older wording (no AOT artifact): the graphs of one dynamic shape, "takes" for the total.
OLDER_WARM = _log(
    f"Using cache directory: {TCC}/d8d288a9e4/rank_0_0/backbone for vLLM's torch.compile",
    "Dynamo bytecode transform time: 7.37 s",
    "Directly load the compiled graph(s) for dynamic shape from the cache, took 1.908 s",
    "torch.compile takes 9.27 s in total",
)
TRITON = "vllm/torch_compile_cache/3a332b42ba/triton_cache/Q2AGE5NEXDXDO3VPMYGSIDBFHNMB5FDDRSRN64LKY7P7XJ2L6VTA"
CUDA_LISTING = "\n".join(
    [
        "vllm/torch_compile_cache/3a332b42ba/inductor_cache/qz/cqzrfb4n7j7sltx3y6i2t7d5v3hvsbzq4qm6qgzuxd7xqcnmzxad.py",
        f"{TRITON}/triton_red_fused_0.cubin",
        f"{TRITON}/triton_red_fused_0.ptx",
        f"{TRITON}/triton_red_fused_0.json",
        f"{TRITON}/__grp__triton_red_fused_0.json",
        "triton/LFZ2K3NDJM6XGQ4V5C6RDQ3ZHYVQH3X4PX2QKXQ7O5AYRPVZ6Q3A/cuda_utils.so",
    ]
)


def test_the_fresh_cache_is_laid_out_as_the_images_lay_out_theirs() -> None:
    template = (Path(__file__).resolve().parents[3] / "templates" / "Dockerfile.j2").read_text(encoding="utf-8")
    root = re.search(r"XDG_CACHE_HOME=(\S+)", template)
    assert root is not None
    env = servecache.cache_env("/c")
    assert env["XDG_CACHE_HOME"] == "/c"
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        image = re.search(rf"{name}=(\S+)", template)
        assert image is not None and env[name] == "/c" + image[1].removeprefix(root[1]), name
    # vLLM's own default under XDG_CACHE_HOME, set so that a VLLM_CACHE_ROOT of the environment cannot move it.
    assert env["VLLM_CACHE_ROOT"] == "/c/vllm"


def test_the_cache_base_is_the_environments_cache_root() -> None:
    assert servecache.cache_base({"XDG_CACHE_HOME": "/data/cache", "HOME": "/home/u"}) == "/data/cache"
    assert servecache.cache_base({"HOME": "/home/u"}) == "/home/u/.cache"
    assert servecache.cache_base({}) == os.path.join(os.path.expanduser("~"), ".cache")


def test_the_cache_folder_is_new_under_the_root_and_holds_the_images_folders(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "root")}  # missing: made
    first, second = servecache.make_cache(env), servecache.make_cache(env)
    assert first != second and Path(first).parent == tmp_path / "root"
    assert Path(first).name.startswith(servecache.CACHE_PREFIX)
    assert sorted(p.name for p in Path(first).iterdir()) == ["torchinductor", "triton", "vllm"]
    assert servecache.list_files(first) == ""
    (Path(first) / "vllm" / "a").mkdir()
    (Path(first) / "vllm" / "a" / "k.so").write_text("")
    assert servecache.list_files(first) == "vllm/a/k.so"


def test_a_cache_root_that_cannot_be_written_is_class_31_and_no_server_starts(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the cache root should be: no folder can be made below it, root or not
    env = {"XDG_CACHE_HOME": str(blocker / "cache"), "PATH": "/usr/bin:/bin"}
    spec = {**bundle.serve_facts(CPU, "full"), "model": "/m", "vllm": ["/nonexistent/vllm"]}
    seen = server.observe(spec, str(tmp_path / "serve.log"), env)
    assert seen["ready_s"] is None and "cache_error" in seen and not (tmp_path / "serve.log").exists()
    status, diagnosis, hint, facts = serving.judge(seen, spec, None)
    assert status == "failed" and facts["failure_class"] == cc.COMPILE_CACHE == 31
    assert facts["warm"]["failure"] == "compile-cache-unwritable"
    assert "NotADirectoryError" in diagnosis and str(blocker / "cache") in diagnosis
    assert "XDG_CACHE_HOME" in hint and "fsGroup" in hint


def test_a_warm_start_is_skipped_with_its_reason() -> None:
    assert cc.warm_budget(1200.0, None, 0.0) == (1200.0, None)
    assert cc.warm_budget(1200.0, 500.0, 100.0) == (400.0, None)
    left, why = cc.warm_budget(1200.0, 142.0, 100.0)
    assert left == 0 and why == "not measured: 42 s of the check's timeout left for a second start"
    assert cc.warm_budget(1200.0, 50.0, 100.0)[1] == cc.skipped_for_time(0)
    assert "--enforce-eager" in cc.WARM_SKIPPED_EAGER


def test_vllms_load_lines_on_cuda_are_reuse_though_dynamo_traced_again() -> None:
    cold, warm = cachelog.evidence(CUDA_COLD), cachelog.evidence(CUDA_WARM)
    assert cold["compiled"] and cold["saved"] and cold["traced"] and cold["compile_s"] == 16.02
    assert warm["loaded"] and warm["traced"] and not warm["compiled"] and warm["compile_s"] == 3.37
    assert warm["keys"] == ["3a332b42ba", KEY] and cold["keys"] == warm["keys"]
    what, line = cc.reuse(warm, [], []) or ("", "")
    assert what == "vLLM's compiled model" and line.startswith("Directly load AOT compilation from path")
    assert cc.not_reused(cold, warm, volume=ROOT) is None
    older = cachelog.evidence(OLDER_WARM)
    assert older["compile_s"] == 9.27
    assert cc.reuse(older, [], []) == (
        "vLLM's compiled graphs",
        "Directly load the compiled graph(s) for dynamic shape from the cache, took 1.908 s",
    )
    failed = cachelog.evidence(_log(f"Cannot load aot compilation from path {TCC}/x/model, error: bad magic"))
    assert failed["load_failed"] and cc.reuse(failed, [], []) is None


def test_tritons_kernels_count_once_each_and_none_added_is_reuse() -> None:
    found = cachelog.kernels(CUDA_LISTING)
    assert [Path(k).name for k in found] == ["cuda_utils.so", "triton_red_fused_0.cubin"]
    load_failed = cachelog.evidence(_log(f"Compiling model again due to a load failure from {TCC}/x/model, reason: r"))
    what, evidence = cc.reuse(load_failed, found, found) or ("", "")
    assert what == "inductor's compiled kernels" and "the 2 kernels (.so, .cubin)" in evidence
    added = [*found, f"{TRITON}/triton_poi_fused_9.cubin"]
    assert cc.reuse(load_failed, found, added) is None


def _seen(**over: Any) -> dict[str, Any]:
    warm = {"ready_s": 40.0, "phases": {"engine core": 30.0}, "log": WARM, "cache_listing": AFTER_WARM}
    base = {"ready_s": 90.0, "probes": _probes([1, 2, 3]), "stop": GOOD_STOP, "argv": ["vllm", "serve"],
            "log": COLD, "cache_root": "/tmp/.cache", "cache_listing": AFTER_COLD, "cache_filesystem": "ext4",
            "warm": warm}  # fmt: skip
    return {**base, **over}


def test_the_host_serve_reports_cold_and_warm_as_the_container_check_does() -> None:
    status, diagnosis, _, facts = serving.judge(_seen(), SPEC, [1, 2, 3])
    assert status == "passed", diagnosis
    assert "; warm start 40 s on the cold start's cache, reusing inductor's compiled kernels" in diagnosis
    assert facts["cold_ready_s"] == 90.0 and facts["warm"]["ready_s"] == 40.0
    assert facts["warm"]["cache_filesystem"] == "ext4"
    # The same facts as the container check's judgement of the same starts (serve_check.judge).
    container = serve_check.Observed(ready_s=90.0, log=COLD, warm=_seen()["warm"], cache_listing=AFTER_COLD,
                               cache_root="/tmp/.cache", probes=_probes([1, 2, 3]), stop=GOOD_STOP)  # fmt: skip
    theirs = serve_check.judge(container, expected_tokens=[1, 2, 3], vllm_version="0.32.0", ready_budget_s=None)[3]
    assert {k: v for k, v in facts["warm"].items() if k != "cache_filesystem"} == theirs["warm"]
    assert facts["cold_ready_s"] == theirs["cold_ready_s"]


def test_the_host_serve_fails_a_warm_start_that_compiled_again_or_never_got_ready() -> None:
    again = {"ready_s": 90.0, "log": WARM, "cache_listing": AFTER_WARM + "\nxx/cnew.so"}
    status, diagnosis, hint, facts = serving.judge(_seen(warm=again), SPEC, None)
    assert status == "failed" and "compile-cache-load-failed" in diagnosis and facts["failure_class"] == 31
    assert "remove the cache folder" in hint
    dead = {"ready_s": None, "exit_code": 1, "log": "RuntimeError: CUDA error: out of memory\n"}
    status, diagnosis, hint, facts = serving.judge(_seen(warm=dead), SPEC, None)
    assert status == "failed" and "the warm start on the cold start's cache exited (1)" in diagnosis
    assert "out of memory" in diagnosis and "warm start's log" in hint
    crashed = {"error": "OSError: [Errno 24] Too many open files", "log": ""}
    status, diagnosis, _, _ = serving.judge(_seen(warm=crashed), SPEC, None)
    assert status == "failed" and "could not run: OSError" in diagnosis
    skipped = serving.judge(_seen(warm={"skipped": cc.WARM_SKIPPED_EAGER}), SPEC, None)
    assert skipped[0] == "passed" and skipped[3]["warm"] == {"skipped": cc.WARM_SKIPPED_EAGER}


def test_the_bundles_deadline_counts_the_warm_servers_stop() -> None:
    full = bundle.facts(CPU, list(CPU.checks), "full")
    quick = bundle.facts(CPU, list(CPU.checks), "quick")
    assert bundle.warm_stop_s(full) == full["serve"]["stop_grace_s"] + KILL_GRACE
    assert bundle.warm_stop_s(quick) == 0
    no_serve = bundle.facts(CPU, [c for c in CPU.checks if c.name != "serve"], "full")
    assert bundle.warm_stop_s(no_serve) == 0
    # The serve check's own timeout holds both starts: the warm one is ready WARM_MARGIN_S before it.
    assert CHECKS["serve"].timeout > serve_check.READY_TIMEOUT_S


# A server of one route: /health answers 200 once the file argv[2] exists (made by the test), and the process
# writes the cache variables it was given to its log; it ignores nothing, so SIGTERM ends it.
HEALTH_ONLY = """
import http.server, os, sys
print('cache', os.environ.get('XDG_CACHE_HOME'), os.environ.get('TRITON_CACHE_DIR'), flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == '/health' else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(('127.0.0.1', int(sys.argv[-1])), H).serve_forever()
"""


@pytest.mark.subprocess
def test_the_warm_server_is_waited_for_then_stopped_with_its_whole_group(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text(HEALTH_ONLY)
    port = server.free_port()
    argv = [sys.executable, str(script), "--port", str(port)]
    env = {**os.environ, **servecache.cache_env(str(tmp_path / "c"))}
    started = time.monotonic()
    warm = server.start_warm(argv, env, str(tmp_path / "warm.log"), 60.0, 10)
    assert warm["ready_s"] is not None and warm["exit_code"] is None, warm
    assert warm["stop_exit_code"] == -15 and time.monotonic() - started < 60
    assert f"cache {tmp_path / 'c'} {tmp_path / 'c' / 'triton'}" in warm["log"]
    assert not server.ACTIVE


@pytest.mark.subprocess
def test_a_server_that_exits_leaves_no_cache_folder_behind(tmp_path: Path) -> None:
    root = tmp_path / "root"
    spec = {**bundle.serve_facts(CPU, "full"), "model": "/m", "ready_timeout_s": 30,
            "vllm": [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]}  # fmt: skip
    seen = server.observe(spec, str(tmp_path / "serve.log"), {**os.environ, "XDG_CACHE_HOME": str(root)})
    assert seen["ready_s"] is None and seen["exit_code"] == 3 and "boom" in seen["log"]
    assert seen["cache_root"].startswith(str(root) + "/") and list(root.iterdir()) == [], "removed on return"
    assert "warm" not in seen
    quick = {**spec, "options": [*spec["options"], server.EAGER]}
    seen = server.observe(quick, str(tmp_path / "serve.log"), {**os.environ, "XDG_CACHE_HOME": str(root)})
    assert seen["warm"] == {"skipped": cc.WARM_SKIPPED_EAGER} and "cache_root" not in seen


def test_the_cache_folders_file_system_is_its_longest_mount_point(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "overlay / overlay rw 0 0\ntmpfs /tmp tmpfs rw 0 0\n/dev/sdb1 /tmp/.cache ext4 rw 0 0\n"
        "nfs:/x /tmp/.cache2 nfs4 rw 0 0\n"
    )
    assert servecache.filesystem("/tmp/.cache/vllm-smoke-cache-1", str(mounts)) == "ext4"
    assert servecache.filesystem("/tmp/other", str(mounts)) == "tmpfs"
    assert servecache.filesystem("/tmp/.cache2x", str(mounts)) == "tmpfs", "a mount point is a whole path component"
    assert servecache.filesystem("/home", str(mounts)) == "overlay"
    assert servecache.filesystem("/home", str(tmp_path / "missing")) == ""


def test_the_h200_runs_own_cache_lines_read_as_they_were_judged_there() -> None:
    """The serve check of the bundle on an H200 (``data/bundle/h200-warm.json``: vLLM 0.25.0, torch 2.11.0+cu130,
    2026-12-02): the lines of vLLM's log the run kept, read again by ``evidence``, give what that run reported:
    the cold start compiled and saved vLLM's AOT artifact, the warm one loaded it and its graphs and compiled
    nothing, under the same cache key."""
    data = Path(__file__).parents[1] / "data" / "bundle" / "h200-warm.json"
    facts = json.loads(data.read_text(encoding="utf-8"))["serve"]["facts"]
    warm = facts["warm"]
    cold = cachelog.evidence("\n".join(_log(line) for line in warm["cold_log_lines"]))
    found = cachelog.evidence("\n".join(_log(line) for line in warm["log_lines"]))
    assert cold["compiled"] and cold["saved"] and not cold["loaded"]
    assert found["loaded"] and not found["compiled"] and found["keys"] == cold["keys"]
    what, line = cc.reuse(found, [], []) or ("", "")
    assert (what, line) == (warm["reused"], warm["reuse_evidence"])
    assert cc.not_reused(cold, found, volume=warm["cache_root"]) is None
    assert warm["kernels"] == {"cold": 78, "added_warm": 0} and warm["ready_s"] < facts["cold_ready_s"]
