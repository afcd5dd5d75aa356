"""The report of a smoke run, the one definition the tool (``matrixtool.report``) and the bundle (``standalone``)
print: the checks' table, each failure with its fix, the skips by reason, the summary line; the ``--json``
document's check entries; a check's JUnit test case. A result is a mapping with the report's fields (``variant``,
``profile``, ``image``, ``check``, ``status`` as its string value, ``diagnosis``, ``hint``, ``seconds``, ``facts``,
``log``: a path or None, ``suite``).

Standard library only, Python >= 3.9."""

from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from . import streams

JSON_SCHEMA_VERSION = 1  # the ``--json`` document's schema (README.md)
DEFAULT_PROFILE = "default"
OK_STATUSES = ("passed", "skipped")
COUNTED = ("passed", "failed", "timeout", "skipped")
CHECK_HEADERS = ("variant", "profile", "check", "status", "time", "diagnosis")
Result = Mapping[str, Any]
# The checks whose results say what an image promises (``promises``), and the report's key for each.
PROMISE_CHECKS = {"cpu-floor": "cpu_floor", "features": "features"}
# A check's JUnit test case: (name, classname, time, outcome: "failed" / "timeout" / "skipped" / None, message,
# system-out or None).
Case = Tuple[str, str, float, Optional[str], str, Optional[str]]


def shorten(text: object, width: int = 100) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def tabulate_simple(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> str:
    """``tabulate(rows, headers)``'s default ("simple") layout for text cells: columns left-aligned, each as wide
    as its widest cell or its header plus 2, two spaces between, a dashed rule under the header."""
    widths = [max([len(h) + 2] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]

    def line(cells: Sequence[object]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def ok(results: Iterable[Result]) -> bool:
    """True when every check passed or was skipped."""
    return all(r["status"] in OK_STATUSES for r in results)


def check_name(r: Result) -> str:
    """``variant/check``, or ``variant/check[profile]`` under a profile other than ``default``."""
    return f"{r['variant']}/{r['check']}" + ("" if r["profile"] == DEFAULT_PROFILE else f"[{r['profile']}]")


def check_parts(results: Sequence[Result]) -> list[str]:
    """The checks' part of the summary: their table, each failure with its diagnosis, fix and log, the skipped
    checks by reason (the diagnosis up to its first `` (`` or ``;``)."""
    parts = []
    if results:
        rows = [
            [r["variant"], r["profile"], r["check"], r["status"] if r["status"] in OK_STATUSES else
             r["status"].upper(), f"{r['seconds']:.1f} s", shorten(r["diagnosis"])]
            for r in results
        ]  # fmt: skip
        parts.append(tabulate_simple(rows, CHECK_HEADERS))
        for r in results:
            if r["status"] not in OK_STATUSES:
                parts.append(
                    f"{check_name(r)}: {r['status']}\n  diagnosis: {r['diagnosis']}\n  fix: {r['hint']}"
                    + (f"\n  log: {r['log']}" if r["log"] else "")
                )
    skipped: dict[str, list[str]] = {}
    for r in results:
        if r["status"] == "skipped":
            skipped.setdefault(r["diagnosis"].split(" (")[0].split(";")[0], []).append(check_name(r))
    parts += [f"skipped ({reason}): {', '.join(names)}" for reason, names in skipped.items()]
    return parts


def suite_parts(results: Sequence[Result]) -> list[str]:
    """The line naming the suites the checks ran in (none without checks)."""
    return [f"suite: {', '.join(dict.fromkeys(r['suite'] for r in results))}"] if results else []


def smoke_time(results: Iterable[Result], wall: float | None) -> str:
    """The summary line's time: the smoke run's ``wall`` seconds (None: not timed) and, labelled, the checks' own
    times summed (they overlap: checks run in parallel and beside the server)."""
    summed = sum(r["seconds"] for r in results)
    if wall is None:
        return f"checks' times summed {summed:.0f} s"
    return f"smoke {wall:.0f} s wall (checks' times summed {summed:.0f} s)"


def summary_line(results: Sequence[Result], passed: bool, wall: float | None) -> str:
    """``OK`` or ``FAILED`` (``passed``), the checks counted by status, the time (``smoke_time``)."""
    counts = {s: sum(1 for r in results if r["status"] == s) for s in COUNTED}
    return (
        ("OK" if passed else "FAILED")
        + f": {counts['passed']} passed, {counts['failed']} failed, {counts['timeout']} timeout, "
        f"{counts['skipped']} skipped; {smoke_time(results, wall)}"
    )


def promises(results: Sequence[Result]) -> Dict[str, Dict[str, Any]]:
    """{variant: what its image promises, as its checks found it}: ``image``; ``cpu_floor`` from ``cpu-floor``
    ({status, proven, floor, qemu_model, capability, extension: the build of vLLM's extension selected there,
    reason: the diagnosis unless passed}) and ``features`` from ``features`` ({status, kept, promised: names,
    left_out: {name: reason}, missing: {name: distributions}, reason}); each only where that check ran. The
    ``default`` profile's result, else the first."""
    found: Dict[str, Dict[str, Any]] = {}
    for r in sorted(results, key=lambda r: r["profile"] != DEFAULT_PROFILE):
        if r["check"] not in PROMISE_CHECKS:
            continue
        entry = found.setdefault(r["variant"], {"image": r.get("image")})
        key, facts = PROMISE_CHECKS[r["check"]], dict(r.get("facts") or {})
        if key in entry:
            continue
        said: Dict[str, Any] = {"status": r["status"]}
        if key == "cpu_floor":
            said["proven"] = r["status"] == "passed"
            said.update({k: facts.get(k) for k in ("floor", "qemu_model", "capability")})
            said["extension"] = list(facts.get("extension") or [])
        else:
            said["kept"] = r["status"] == "passed"
            said["promised"] = [str(p[0]) for p in facts.get("promised") or []]
            said.update(left_out=dict(facts.get("left_out") or {}), missing=dict(facts.get("missing") or {}))
        if r["status"] != "passed":
            said["reason"] = r["diagnosis"]
        entry[key] = said
    return found


def promise_parts(results: Sequence[Result]) -> List[str]:
    """The table's lines of what each image promises (``promises``): the CPU floor it was proven on, the features
    it carries and those it leaves out; none where neither check ran."""
    lines = []
    for variant, entry in promises(results).items():
        said = []
        floor = entry.get("cpu_floor")
        if floor is not None and floor["proven"]:
            how = [f"QEMU {floor['qemu_model']}"] + [f"vLLM's {', '.join(floor['extension'])}"] * bool(
                floor["extension"]
            )
            said.append(f"runs on {floor['floor']} (proven under {'; '.join(how)})")
        elif floor is not None:
            said.append(f"CPU floor NOT proven ({floor['status']}: {shorten(floor['reason'], 80)})")
        features = entry.get("features")
        if features is not None:
            left = ", ".join(features["left_out"]) or "nothing"
            kept = "each exercised" if features["kept"] else f"NOT kept, {features['status']}: see features"
            said.append(f"features {', '.join(features['promised']) or 'none'} ({kept}); leaves out {left}")
        lines.append(f"{variant} promises: {'; '.join(said)}")
    return lines


def table(results: Sequence[Result], wall: float | None = None) -> str:
    """The summary the bundle prints (``matrixtool.report.table`` of a run without builds or errors); ``wall``:
    the run's wall time in seconds (None: not timed)."""
    parts = [*check_parts(results), *promise_parts(results), *suite_parts(results)]
    return "\n\n".join([*parts, summary_line(results, ok(results), wall)])


def check_json(r: Result) -> dict[str, Any]:
    """One check's entry of the ``--json`` document (its seconds rounded to tenths)."""
    keys = ("variant", "profile", "image", "check", "status", "diagnosis", "hint", "seconds", "facts", "log", "suite")
    return dict({k: r.get(k) for k in keys}, seconds=round(r["seconds"], 1))


def document(
    results: Sequence[Result],
    *,
    passed: bool,
    wall: float | None,
    builds: Sequence[Mapping[str, Any]] = (),
    errors: Mapping[str, str] | None = None,
    skipped: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``--json`` document (schema version ``JSON_SCHEMA_VERSION``): ``passed`` its ``ok``, ``wall`` as
    ``smoke_time``; ``builds``, ``errors`` and ``skipped`` variants as the tool reports them."""
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "ok": passed,
        "builds": list(builds),
        "checks": [check_json(r) for r in results],
        "errors": dict(errors or {}),
        "skipped": dict(skipped or {}),
        "promises": promises(results),
        "smoke_wall_seconds": None if wall is None else round(wall, 1),
        "checks_seconds_summed": round(sum(r["seconds"] for r in results), 1),
    }


def to_json(results: Sequence[Result], wall: float | None = None) -> dict[str, Any]:
    """The bundle's ``--json`` document; ``wall`` as ``table``."""
    return document(results, passed=ok(results), wall=wall)


def junit_case(r: Result) -> Case:
    """Check ``r`` as a JUnit test case: classname ``smoke.<variant>`` under ``default``,
    ``smoke.<variant>.<profile>`` under another; the message its diagnosis; a failure's system-out its fix,
    image, profile and log."""
    classname = f"smoke.{r['variant']}" + ("" if r["profile"] == DEFAULT_PROFILE else f".{r['profile']}")
    out = None
    if r["status"] == "failed":
        out = f"fix: {r['hint']}\nimage: {r['image']}\nprofile: {r['profile']}\nlog: {r['log']}"
    outcome = r["status"] if r["status"] in ("failed", "timeout", "skipped") else None
    return r["check"], classname, round(r["seconds"], 3), outcome, r["diagnosis"], out


def junit_xml(results: Sequence[Result]) -> str:
    """The bundle's JUnit XML: one ``testsuite`` per variant (its suites as properties), a ``testcase`` per
    check (``junit_case``)."""
    root = ET.Element("testsuites", name="vllm-image-matrix")
    for variant in dict.fromkeys(r["variant"] for r in results):
        mine = [r for r in results if r["variant"] == variant]
        suite = ET.SubElement(root, "testsuite", name=variant, tests=str(len(mine)))
        props = ET.SubElement(suite, "properties")
        for name in dict.fromkeys(r["suite"] for r in mine):
            ET.SubElement(props, "property", name="suite", value=name)
        counts: Dict[str, int] = {"failures": 0, "errors": 0, "skipped": 0}
        for r in mine:
            name, classname, seconds, outcome, message, out = junit_case(r)
            case = ET.SubElement(suite, "testcase", name=name, classname=classname, time=str(seconds))
            if outcome == "failed":
                ET.SubElement(case, "failure", message=message, type="failed")
                ET.SubElement(case, "system-out").text = out
                counts["failures"] += 1
            elif outcome == "timeout":
                ET.SubElement(case, "error", message=message, type="timeout")
                counts["errors"] += 1
            elif outcome == "skipped":
                ET.SubElement(case, "skipped", message=message)
                counts["skipped"] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
    return ET.tostring(root, encoding="unicode")


def write(path: str, text: str) -> None:
    """``text`` to ``path`` whole (a temporary file renamed over it; a stream, ``streams.is_stream``, is written in
    place: a FIFO, a device, ``/dev/stdout`` redirected to a file)."""
    if streams.is_stream(path) or (os.path.exists(path) and not os.path.isfile(path)):
        if not streams.write_to_own_fd(path, text.encode("utf-8")):  # /dev/stdout: through fd 1, in order
            # A FIFO without a reader is refused after streams.FIFO_READER_WAIT_S (ENXIO), as the tool refuses it.
            with os.fdopen(streams.open_stream(path), "w", encoding="utf-8") as f:
                f.write(text)
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".vllm-smoke-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, streams.new_file_mode())  # mkstemp's 0600 would make the report unreadable to the others
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
