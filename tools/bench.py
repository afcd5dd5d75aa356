"""`make bench`: cold build time, image size and smoke wall time of a variant, measured end to end.

Cold means: no image of the variant, no base image and no BuildKit cache on the engine before the run
(everything is removed first; packages are downloaded again). Results: printed, and written to
``build/bench/<variant>.json``. Speed and size are measured here, never asserted in tests.

Usage: python tools/bench.py [VARIANT] [--warm]   (--warm keeps images and cache: a rebuild-from-cache figure)
       python tools/bench.py --compare A B        (B against A from build/bench/{A,B}.json, e.g. cpu arm64:
                                                    the arm64 image under QEMU against the x86-64 run)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matrixtool.matrix import Platform

REPO = Path(__file__).resolve().parents[1]
MATRIX = str(REPO / "tools" / "matrix")


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    print("+ " + " ".join(argv), file=sys.stderr, flush=True)
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def make_cold(variant: str, base_image: str, platforms: list[Platform]) -> None:
    """Remove the variant's images, its base image (and its per-platform tags) and the whole BuildKit cache."""
    from matrixtool.base import platform_tag

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
        ("smoke (s)", a["smoke_seconds"], b["smoke_seconds"]),
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
    its smoke seconds to the ``default`` profile's in the same run (README "Deployment profiles")."""
    out: dict[str, dict[str, Any]] = {}
    for c in checks:
        entry = out.setdefault(c.get("profile", "default"), {"smoke_seconds": 0.0, "checks": {}})
        entry["smoke_seconds"] = round(entry["smoke_seconds"] + c["seconds"], 1)
        entry["checks"][c["check"]] = {"status": c["status"], "seconds": c["seconds"]}
    reference = out.get("default", {}).get("smoke_seconds")
    for entry in out.values():
        entry["vs_default"] = round(entry["smoke_seconds"] / reference, 2) if reference else None
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--compare"]:
        if len(argv) != 3:
            print("usage: python tools/bench.py --compare A B   (two variants benchmarked before)", file=sys.stderr)
            return 2
        return compare(argv[1], argv[2])
    variant = next((a for a in argv if not a.startswith("--")), "cpu")
    warm = "--warm" in argv
    sys.path.insert(0, str(REPO / "tools"))
    from matrixtool.matrix import load_matrix

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
        "smoke_seconds": round(sum(c["seconds"] for c in doc["checks"]), 1),
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
