"""Benchmarks: speed and size are measured here, as ratios against a reference timed in the same run, never
asserted in tests.

``python tools/bench.py suites [VARIANT]`` (``make bench``, issue 10): builds the variant's image or reuses it,
then times, one after the other on the same machine, the naive trio: the naive pair (``tools/naive_generate.py``
in the image, eager then compiled, each its own ``docker run``: what a user writes to prove an image generates)
and the naive server (the same tiny model written by one ``docker run``, then ``docker run IMAGE serve /model``
with vLLM's defaults, ``/health`` polled until 200, one completion: what a user writes to prove an image serves);
then the full smoke suite and the quick one (``tools/matrix test --image ... --suite full|quick``). Prints the
table, what ran beside what (the naive parts alone, one after the other; in each suite, the tool's own line
``[VARIANT] profiles: ...``: which profile runs went side by side, and how many check groups at a time beside the
serve step) and writes ``build/bench/<variant>.suites.json`` with each wall time in seconds, per-check times, the
``beside`` lines and the ratios suite / naive server alone, suite / naive server's cold + warm starts, suite /
naive pair and suite / naive trio (the targets, issue 39: full suite <= 1.0x the naive server's cold + warm
starts, quick suite <= 0.25x the trio).

``python tools/bench.py build [VARIANT] [--warm]`` (``make bench-build``): cold build time, image size and
smoke wall time of ``tools/matrix run``. Cold means: no image of the variant, no base image and no BuildKit
cache on the engine before the run (everything is removed first; packages are downloaded again);
``--warm`` keeps them (a rebuild-from-cache figure). Writes ``build/bench/<variant>.json``.

``python tools/bench.py compare A B``: B against A from ``build/bench/{A,B}.json`` (e.g. ``cpu arm64``: the arm64
image under QEMU against the x86-64 run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench_naive import naive, naive_serve

if TYPE_CHECKING:
    from matrixtool.model.model import Platform

REPO = Path(__file__).resolve().parents[1]
MATRIX = str(REPO / "tools" / "matrix")


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    print("+ " + " ".join(argv), file=sys.stderr, flush=True)
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def make_cold(variant: str, base_image: str, platforms: list[Platform]) -> None:
    """Remove the variant's images, its base image (and its per-platform tags) and the whole BuildKit cache."""
    from matrixtool.build.base import platform_tag

    images = _run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", f"vllm-matrix/{variant}"]).stdout.split()
    for ref in [*images, base_image, *(platform_tag(base_image, p) for p in platforms)]:
        _run(["docker", "rmi", "-f", ref])
    _run(["docker", "buildx", "prune", "--all", "--force"])


def compare(first: str, second: str) -> int:
    """Print ``second``'s figures against ``first``'s (both from earlier runs: ``build/bench/<variant>.json``)
    and write ``build/bench/<first>-vs-<second>.txt``. Times in seconds, sizes in GB (10^9 bytes); the ratio
    column is second / first. Returns 0, or 2 when a figures file is missing or unreadable."""
    out = REPO / "build" / "bench"
    try:
        a, b = (json.loads((out / f"{v}.json").read_text(encoding="utf-8")) for v in (first, second))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"no figures yet ({exc}); run 'python tools/bench.py {first}' and '... {second}' first", file=sys.stderr)
        return 2
    rows = [
        ("wall (s)", a["wall_seconds"], b["wall_seconds"]),
        ("build (s)", a["build_seconds"], b["build_seconds"]),
        ("image size (GB)", round(a["image_size_bytes"] / 1e9, 2), round(b["image_size_bytes"] / 1e9, 2)),
        ("smoke, wall (s)", a["smoke_seconds"], b["smoke_seconds"]),
    ]
    rows += [
        (f"  {name} (s)", a["checks"][name]["seconds"], b["checks"][name]["seconds"])
        for name in a["checks"]
        if name in b["checks"]
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'':{width}}  {first:>9}  {second:>9}  {'ratio':>6}"]
    for label, x, y in rows:
        ratio = f"{y / x:5.1f}x" if x else "     -"
        lines.append(f"{label:{width}}  {x:>9}  {y:>9}  {ratio:>6}")
    text = "\n".join(lines)
    (out / f"{first}-vs-{second}.txt").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def _profile_figures(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per deployment profile: its smoke seconds (sum of its checks' wall times), its checks, and the ratio of
    its smoke seconds to the ``default`` profile's in the same run (docs/profiles.md)."""
    out: dict[str, dict[str, Any]] = {}
    for c in checks:
        entry = out.setdefault(c.get("profile", "default"), {"smoke_seconds": 0.0, "checks": {}})
        entry["smoke_seconds"] = round(entry["smoke_seconds"] + c["seconds"], 1)
        entry["checks"][c["check"]] = {"status": c["status"], "seconds": c["seconds"]}
    reference = out.get("default", {}).get("smoke_seconds")
    for entry in out.values():
        entry["vs_default"] = round(entry["smoke_seconds"] / reference, 2) if reference else None
    return out


def build_bench(variant: str, warm: bool) -> int:
    """``build`` mode: a cold (or ``warm``) ``tools/matrix run VARIANT``; figures to ``build/bench/<variant>.json``.
    Returns 0, or 1 when the run failed or wrote no report."""
    from matrixtool.model.matrixfile import load_matrix

    (spec,) = [v for v in load_matrix().variants if v.name == variant]
    if not warm:
        make_cold(variant, spec.base_image, list(spec.platforms))
    out = REPO / "build" / "bench"
    started = time.monotonic()
    report_file = out / f"{variant}.report.json"
    proc = subprocess.run(
        [MATRIX, "--out", str(out), "run", variant, "--json-file", str(report_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    (out / f"{variant}.run.log").write_text(proc.stderr, encoding="utf-8")
    (out / f"{variant}.table.txt").write_text(proc.stdout, encoding="utf-8")
    print(proc.stdout)  # the summary table as `tools/matrix run` printed it
    try:
        doc = json.loads(report_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        return 1
    build = doc["builds"][0]
    result = {
        "variant": variant,
        "cold": not warm,
        "ok": doc["ok"],
        "wall_seconds": round(wall, 1),
        "build_seconds": build["build_seconds"],
        "image_size_bytes": build["size_bytes"],
        # The smoke run's wall time (the report's; older reports lack it) and, apart, the checks' times summed.
        "smoke_seconds": doc.get("smoke_wall_seconds") or round(sum(c["seconds"] for c in doc["checks"]), 1),
        "checks_seconds_summed": round(sum(c["seconds"] for c in doc["checks"]), 1),
        # The `default` profile's checks (every check); other profiles' under "profiles".
        "checks": {
            c["check"]: {"status": c["status"], "seconds": c["seconds"]}
            for c in doc["checks"]
            if c.get("profile", "default") == "default"
        },
        "profiles": _profile_figures(doc["checks"]),
    }
    (out / f"{variant}.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0 if doc["ok"] else 1


def _timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    proc = _run(argv)
    return round(time.monotonic() - started, 1), proc


PROFILES_LINE = "] profiles: "  # the tool's stderr line saying which runs went beside which (smoke.room)


def beside(stderr: str) -> str:
    """What ran beside what in one ``tools/matrix`` run: its ``[VARIANT] profiles: ...`` lines (``smoke.room``),
    joined; empty when it printed none."""
    return " | ".join(line.split(PROFILES_LINE, 1)[1] for line in stderr.splitlines() if PROFILES_LINE in line)


def suite(image: str, variant: str, name: str, out: Path) -> tuple[float, dict[str, Any] | None, str, str]:
    """Wall seconds of ``tools/matrix test --image IMAGE --as VARIANT --suite NAME`` (container start, copying
    the checks in, every check, removal), its JSON report (None when it wrote none), its table and what ran beside
    what (``beside``)."""
    report = out / f"{variant}.{name}.report.json"
    report.unlink(missing_ok=True)
    seconds, proc = _timed(
        [
            MATRIX,
            "--out",
            str(out),
            "test",
            "--image",
            image,
            "--as",
            variant,
            "--suite",
            name,
            "--json-file",
            str(report),
        ]
    )
    try:
        doc = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return seconds, None, proc.stdout + proc.stderr, beside(proc.stderr)
    return seconds, doc, proc.stdout, beside(proc.stderr)


def image_ref(variant: str, wheelhouse: str | None, out: Path) -> str | None:
    """Build ``variant`` with ``tools/matrix build`` (a no-op when its content-hash tag exists) and return the
    image reference from the JSON report, or None (the build's output is printed) when it failed."""
    report = out / f"{variant}.build.json"
    argv = [MATRIX, "--out", str(out), "build", variant, "--json-file", str(report)]
    if wheelhouse:
        argv += ["--wheelhouse", wheelhouse]
    proc = _run(argv)
    try:
        doc = json.loads(report.read_text(encoding="utf-8"))
        return str(doc["builds"][0]["image"]) if proc.returncode == 0 else None
    except (OSError, json.JSONDecodeError, KeyError, IndexError):
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        return None


def suites_table(result: dict[str, Any]) -> str:
    """The table ``make bench`` prints from a ``suites`` result: each part's wall seconds and each suite's ratios
    to the naive server alone, to the naive server started twice on one kept cache (cold then warm: the two starts
    the full suite's serve check makes), to the naive pair and to the naive trio, all from the same run."""
    naive_ = result["naive"]
    rows: list[tuple[str, float, str, str, str, str]] = [
        ("naive eager (docker run)", naive_["eager_seconds"], "", "", "", ""),
        ("naive compiled (docker run)", naive_["compiled_seconds"], "", "", "", ""),
        ("naive pair", naive_["pair_seconds"], "", "", "1.00", ""),
        ("naive server (docker run serve)", naive_["server_seconds"], "1.00", "", "", ""),
        ("naive server again, warm", naive_["warm_server_seconds"], "", "", "", ""),
        ("naive server cold + warm", naive_["cold_warm_servers_seconds"], "", "1.00", "", ""),
        ("naive trio", naive_["trio_seconds"], "", "", "", "1.00"),
    ]
    for name in ("full", "quick"):
        part = result[name]
        keys = ("vs_naive_server", "vs_naive_cold_warm", "vs_naive_pair", "vs_naive_trio")
        rows.append((f"{name} suite", part["seconds"], *(f"{part[k]:.2f}" for k in keys)))
    header = (
        f"{'':31} {'seconds':>8}  {'x naive server':>14}  {'x cold+warm':>11}  {'x naive pair':>12}  "
        f"{'x naive trio':>12}"
    )
    targets = (
        f"targets (issue 39): full suite <= 1.00 x cold+warm (now {result['full']['vs_naive_cold_warm']:.2f}), "
        f"quick suite <= 0.25 x naive trio (now {result['quick']['vs_naive_trio']:.2f})"
    )
    side = [
        "what ran beside what:",
        "  naive parts: each alone, one after the other (one docker run at a time, the warm start after the cold)",
        *(f"  {name} suite: {result[name].get('beside') or '?'}" for name in ("full", "quick")),
        "  full suite's serve: two starts one after the other, the warm one the first's restart after its SIGKILL "
        "(the quick suite: one start)",
    ]
    return "\n".join(
        [header]
        + [
            f"{label:31} {sec:8.1f}  {srv:>14}  {both:>11}  {pair:>12}  {trio:>12}"
            for label, sec, srv, both, pair, trio in rows
        ]
        + [targets, *side]
    )


def _suite_figures(
    seconds: float, doc: dict[str, Any] | None, naive_s: dict[str, float], side: str = ""
) -> dict[str, Any]:
    """One suite's figures: its wall ``seconds``, whether its report ``doc`` is ok, what ran beside what (``side``:
    the tool's profiles line), its ratio to each naive figure of ``naive_s`` (``vs_naive_<name>``), its smoke wall
    time and per-check times."""
    return {
        "seconds": seconds,
        "ok": bool(doc and doc["ok"]),
        "beside": side,
        **{f"vs_naive_{name}": round(seconds / naive, 2) for name, naive in naive_s.items()},
        "smoke_wall_seconds": (doc or {}).get("smoke_wall_seconds"),
        "checks": {c["check"]: {"status": c["status"], "seconds": c["seconds"]} for c in (doc or {}).get("checks", [])},
    }


def suites_bench(variant: str, wheelhouse: str | None) -> int:
    """``suites`` mode (``make bench``): the naive trio (pair and server), the full suite and the quick suite on
    one image, timed in one run; prints a table and writes ``build/bench/<variant>.suites.json``. Returns 0 when
    every part passed (the ratios are figures, not verdicts), 1 otherwise."""
    out = REPO / "build" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    image = image_ref(variant, wheelhouse, out)
    if image is None:
        return 1
    eager_s, eager_tokens, eager_log = naive(image, "eager")
    compiled_s, compiled_tokens, compiled_log = naive(image, "compiled")
    # The naive server twice on one kept cache volume: the first start is the naive server alone (the volume is
    # empty, the work is a plain `docker run ... serve`'s), the second its warm start. The serve check of the
    # full suite makes the same two starts, so the pair is its like-for-like reference.
    cache = f"bench-naive-cache-{uuid.uuid4().hex[:8]}"
    try:
        server_s, server_ready_s, server_text, server_log = naive_serve(image, out, cache)
        warm_s, warm_ready_s, warm_text, warm_log = naive_serve(image, out, cache, make_model=False)
    finally:
        _run(["docker", "volume", "rm", "-f", cache])
        shutil.rmtree(out / "naive-model", ignore_errors=True)
    full_s, full, full_table, full_beside = suite(image, variant, "full", out)
    quick_s, quick, quick_table, quick_beside = suite(image, variant, "quick", out)
    pair = round(eager_s + compiled_s, 1)
    trio = round(pair + server_s, 1)
    servers = round(server_s + warm_s, 1)
    naive_figures = {"server": server_s, "cold_warm": servers, "pair": pair, "trio": trio}
    result: dict[str, Any] = {
        "variant": variant,
        "image": image,
        "cpus": os.cpu_count(),
        "naive": {
            "eager_seconds": eager_s,
            "compiled_seconds": compiled_s,
            "pair_seconds": pair,
            "server_seconds": server_s,
            "server_ready_seconds": server_ready_s,
            "trio_seconds": trio,
            "warm_server_seconds": warm_s,
            "warm_server_ready_seconds": warm_ready_s,
            "cold_warm_servers_seconds": servers,
        },
        "naive_tokens_equal": eager_tokens is not None and eager_tokens == compiled_tokens,
        "full": _suite_figures(full_s, full, naive_figures, full_beside),
        "quick": _suite_figures(quick_s, quick, naive_figures, quick_beside),
    }
    (out / f"{variant}.suites.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    text = suites_table(result)
    (out / f"{variant}.suites.txt").write_text(full_table + "\n" + quick_table + "\n" + text + "\n", encoding="utf-8")
    print(full_table)
    print(quick_table)
    print(text)
    parts = (
        ("naive eager", eager_tokens is not None, eager_log),
        ("naive compiled", compiled_tokens is not None, compiled_log),
        ("naive server", server_text is not None, server_log),
        ("naive server (warm)", warm_text is not None, warm_log),
        ("full suite", result["full"]["ok"], full_table),
        ("quick suite", result["quick"]["ok"], quick_table),
    )
    failed = [name for name, ok, _ in parts if not ok]
    for name, ok, log in parts:
        if not ok:
            print(f"{name} failed:\n{log[-3000:]}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    """Parse ``argv`` (without the program name), run one mode and return its exit status."""
    parser = argparse.ArgumentParser(prog="tools/bench.py", description="Benchmarks of the matrix tool (make bench).")
    modes = parser.add_subparsers(dest="mode", required=True)
    suites = modes.add_parser("suites", help="the full and quick smoke suites against the naive pair (make bench)")
    suites.add_argument("variant", nargs="?", default="cpu")
    suites.add_argument("--wheelhouse", help="passed to tools/matrix build (the folder of the CPU torch wheel)")
    build = modes.add_parser("build", help="cold build time, image size and smoke wall time (make bench-build)")
    build.add_argument("variant", nargs="?", default="cpu")
    build.add_argument(
        "--warm", action="store_true", help="keep images and BuildKit's cache (a rebuild-from-cache figure)"
    )
    compare_ = modes.add_parser("compare", help="B against A from earlier build runs (build/bench/{A,B}.json)")
    compare_.add_argument("first")
    compare_.add_argument("second")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "tools"))
    if args.mode == "compare":
        return compare(args.first, args.second)
    if args.mode == "build":
        return build_bench(args.variant, args.warm)
    return suites_bench(args.variant, args.wheelhouse)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
