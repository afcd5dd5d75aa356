"""The bundle's suite: ``python3 vllm-smoke-VARIANT.pyz [--json FILE] [--junit FILE] [--logs DIR]`` runs the
variant's whole smoke plan in the environment it is started in (a host, a pod, a container of any image) and
prints the table, verdicts and JSON document ``tools/matrix test`` prints.

The variant's facts (``BUNDLE_FACTS``, written by ``tools/matrix bundle``): the check parameters (pins, Triton
promise), the plan's groups in start order with each check's timeout, and the serve step (the server's options,
its timeouts, the tiny model's settings). Each group runs in a child interpreter of this archive in a process
group of its own, killed past its checks' timeouts summed (exit 124, as coreutils ``timeout`` reports it);
``serve`` runs last, as a child ``vllm serve`` process (``serving``), on the model the ``tiny-model`` check made
and judged against offline-generate's eager tokens of the same run.

Standard library only, Python >= 3.9. Exit status: 0 when every check passed or was skipped, 7 (the tool's
smoke-failure code) otherwise, 2 for bad arguments, a package without facts, a report or log folder that cannot
be written (refused before anything runs; a report that fails at the end is named after the table), 130/143 on
SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import pkgutil
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import xml.etree.ElementTree as ET
import zipimport

from . import compilecache, factshape, rootcause, serving, streams
from .catalogue import DECLARATIONS
from .common import PACKAGE, attached_gpu, last_error_line, parse_results, split_logs

BUNDLE_FACTS = "bundle_facts.json"
FACTS_FORMAT = 1
JSON_SCHEMA_VERSION = 1  # the tool's report schema (``matrixtool.report.JSON_SCHEMA_VERSION``)
EXIT_OK, EXIT_USAGE, EXIT_SMOKE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 2, 7, 130, 143
KILL_GRACE = 10  # seconds between SIGTERM and SIGKILL to a group past its timeout
TIMEOUT_EXIT = 124  # what coreutils ``timeout`` exits with: the verdict reads it as a timeout
# A line per result on stdout with --stream-results (``matrixtool`` reads them as progress).
CHECK_MARK = "MATRIX-CHECK "
MODEL_MARK = "MATRIX-MODEL "
DEFAULT_PROFILE = "default"


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived: every child group is killed on the way out; ``code`` is the exit status."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


class UsageError(Exception):
    """Bad arguments or a package without facts (exit 2)."""


def load_facts():
    """The facts this archive carries (``BUNDLE_FACTS``). Raises UsageError when there are none."""
    try:
        data = pkgutil.get_data(PACKAGE, BUNDLE_FACTS)
    except OSError:
        data = None
    if not data:
        raise UsageError(
            "this package carries no variant facts (it is the plain check package, not a bundle); "
            "make one with: tools/matrix bundle VARIANT"
        )
    try:
        facts = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise UsageError(
            f"{BUNDLE_FACTS} is not JSON ({exc}); make the bundle again: tools/matrix bundle VARIANT"
        ) from None
    if isinstance(facts, dict) and facts.get("format") != FACTS_FORMAT:
        raise UsageError(f"{BUNDLE_FACTS} is format {facts.get('format')!r}; this code reads {FACTS_FORMAT}")
    found = factshape.problems(facts)
    if found:
        raise UsageError(
            f"{BUNDLE_FACTS} is not what tools/matrix bundle writes: {'; '.join(found)}; "
            "make the bundle again (tools/matrix bundle VARIANT) rather than editing it"
        )
    return facts


def parse_args(argv):
    """The bundle's flags (``argv`` without the program). Raises UsageError for bad ones (argparse's message)."""
    parser = argparse.ArgumentParser(
        prog="vllm-smoke.pyz",
        description="Run the variant's vLLM smoke suite here (this Python's environment), serve included.",
    )
    parser.add_argument(
        "--json", dest="json_file", default=None, help="write the JSON report here ('-': stdout, the table to stderr)"
    )
    parser.add_argument("--junit", default=None, help="write a JUnit XML report here")
    parser.add_argument("--logs", default=None, help="folder for each check's log (default: in the work folder)")
    parser.add_argument("--image", default=None, help="what the results name as image (default: host:PYTHON)")
    parser.add_argument("--facts", action="store_true", help="print the variant's facts this bundle carries")
    parser.add_argument("--stream-results", action="store_true", help=argparse.SUPPRESS)

    def error(message):
        raise UsageError(f"{message}; see --help")

    parser.error = error  # type: ignore[method-assign]
    return parser.parse_args(argv)


def self_argv():
    """How a child interpreter runs this package: ``[python, ARCHIVE]`` from a zipapp, else ``python -c`` with
    the folder holding the package on ``sys.path``."""
    loader = globals().get("__loader__")
    if isinstance(loader, zipimport.zipimporter):
        return [sys.executable, loader.archive]
    parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    boot = f"import sys; sys.path.insert(0, sys.argv.pop(1)); from {PACKAGE}.runner import entry; sys.exit(entry())"
    return [sys.executable, "-c", boot, parent]


class Children:
    """The process groups this run started (each child leads its own); ``kill_all`` ends every one left, and a
    child started after it is ended at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.procs = set()
        self.closed = False

    def start(self, argv, env):
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        with self.lock:
            self.procs.add(proc)
            closed = self.closed
        if closed:
            serving.kill_group(proc.pid)
        return proc

    def done(self, proc):
        with self.lock:
            self.procs.discard(proc)

    def kill_all(self):
        with self.lock:
            self.closed = True
            procs = list(self.procs)
        for proc in procs:
            serving.kill_group(proc.pid)
        for server in list(serving.ACTIVE):
            server.close()


class Bounded:
    """The head (``HEAD``) and tail (``TAIL``) bytes of a stream, what lies between counted and named (as
    ``matrixtool.core.bounded``): a check that prints without end cannot exhaust this run's memory."""

    HEAD, TAIL = 1 << 20, 4 << 20

    def __init__(self):
        self.head, self.tail, self.dropped = bytearray(), bytearray(), 0

    def feed(self, chunk):
        room = self.HEAD - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > self.TAIL:
            excess = len(self.tail) - self.TAIL
            del self.tail[:excess]
            self.dropped += excess

    def pump(self, stream):
        for chunk in iter(lambda: stream.read1(1 << 16), b""):
            self.feed(chunk)

    def text(self):
        head, tail = self.head.decode("utf-8", "replace"), self.tail.decode("utf-8", "replace")
        if not self.dropped:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace")
        return head + f"\n[... {self.dropped} bytes of output left out ...]\n" + tail


def run_group(children, names, params, timeouts, env):
    """Run the checks ``names`` in one child interpreter: (exit status or 124 past their timeouts summed, output,
    wall seconds). Past the timeout the child's group gets SIGTERM, then SIGKILL ``KILL_GRACE`` s later."""
    limit = sum(int(timeouts[n]) for n in names)
    argv = [*self_argv(), "run", ",".join(names), json.dumps(dict(params, timeouts={n: timeouts[n] for n in names}))]
    started = time.monotonic()
    proc = children.start(argv, env)
    kept = Bounded()
    reader = threading.Thread(target=kept.pump, args=(proc.stdout,), daemon=True)
    reader.start()
    try:
        code = proc.wait(limit)
    except subprocess.TimeoutExpired:
        serving.kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(KILL_GRACE)
        except subprocess.TimeoutExpired:
            serving.kill_group(proc.pid)
            proc.wait()
        code = TIMEOUT_EXIT
    serving.kill_group(proc.pid)  # what the group left behind
    reader.join(30)
    proc.stdout.close()
    children.done(proc)
    output = kept.text().replace("\r\n", "\n").replace("\r", "\n")
    return code, output, time.monotonic() - started


def oom_hint(accelerator):
    """The hint for a check SIGKILLed before its timeout (``matrixtool.smoke.result.oom_hint``): the kernel's OOM
    killer ends a process short of host memory; on cpu the KV cache lives there (VLLM_CPU_KVCACHE_SPACE)."""
    if accelerator == "cpu":
        return "give the environment more memory, or lower VLLM_CPU_KVCACHE_SPACE"
    return (
        "the host's or pod's memory limit killed it (the kernel's OOM killer, host memory, not GPU memory): "
        "give the environment (or its pod) more memory"
    )


def verdict(check, exit_code, output, timeout, seconds, accelerator="cpu"):
    """(status, diagnosis, hint, facts) of one check from its group's exit status, output and wall time; as
    ``matrixtool.smoke.result.verdict`` (137 before the timeout: killed, most often out of memory)."""
    hint = DECLARATIONS[check].hint if check in DECLARATIONS else ""
    tail = " | ".join(output.strip().splitlines()[-3:])
    if exit_code == 137 and seconds < timeout:
        return (
            "failed",
            f"killed by SIGKILL after {seconds:.0f} s, before its {timeout} s timeout (out of memory?): {tail}",
            oom_hint(accelerator),
            {},
        )
    if exit_code is None or exit_code in (TIMEOUT_EXIT, 137):
        return "timeout", f"no result within {timeout} s; the check was killed", hint, {}
    try:
        results = parse_results(output)
        parsed = results.get(check, results.get(None))
        status = parsed["status"] if parsed is not None else None
        if status not in (None, "passed", "failed", "skipped", "timeout"):
            raise ValueError(f"status {status!r}")
    except (ValueError, KeyError, TypeError) as exc:
        return "failed", f"the check printed an unreadable result ({exc}): {tail}", hint, {}
    if parsed is None or status is None:
        return "failed", f"the check printed no result (exit {exit_code}): {tail}", hint, {}
    return status, str(parsed.get("diagnosis", "")), str(parsed.get("hint") or hint), dict(parsed.get("facts", {}))


def unhidden(result, names):
    """A skip for a prerequisite that failed but is not among ``names`` becomes that failure (a skip never hides
    a failure; as ``matrixtool.smoke.result.unhidden``)."""
    need = (result.get("facts") or {}).get("failed_need")
    if result["status"] != "skipped" or not need or need in names:
        return result
    hint = result["facts"].get("need_hint") or (DECLARATIONS[need].hint if need in DECLARATIONS else "")
    diagnosis = f"{need} failed here: {result['facts'].get('need_diagnosis') or 'see the log'}"
    return dict(result, status="failed", diagnosis=diagnosis, hint=str(hint))


class Suite:
    """One run of the bundle's plan (``facts``) in this environment: ``env`` for every child, logs to ``logs``,
    ``image`` naming this environment in the results, ``on_result`` seeing each result as it lands."""

    def __init__(self, facts, *, env, logs, image, on_result):
        self.facts, self.env, self.logs, self.image, self.on_result = facts, env, logs, image, on_result
        self.children = Children()
        self.lock = threading.Lock()
        self.outcomes = {}  # check -> result dict (the report's fields)
        self.timeouts = {c["name"]: int(c["timeout"]) for c in facts["checks"]}
        self.pending = []  # the groups no worker has started yet

    def stop(self):
        """End the run: no worker starts another group (``pending`` cleared under the lock), then every child
        ends (``Children.kill_all``)."""
        with self.lock:
            self.pending.clear()
        self.children.kill_all()

    def _result(self, check, status, diagnosis, hint, facts, seconds, log):
        return {
            "variant": self.facts["variant"],
            "profile": DEFAULT_PROFILE,
            "image": self.image,
            "check": check,
            "status": status,
            "diagnosis": diagnosis,
            "hint": "" if status in ("passed", "skipped") else hint,
            "seconds": seconds,
            "facts": facts,
            "log": log,
            "suite": self.facts["params"].get("suite", "full"),
        }

    def _land(self, result):
        with self.lock:
            self.outcomes[result["check"]] = result
            self.on_result(result)

    def group(self, names):
        code, output, wall = run_group(self.children, names, self.facts["params"], self.timeouts, self.env)
        parts = split_logs(output)
        limit = sum(self.timeouts[n] for n in names)
        for name in names:
            log = os.path.join(self.logs, f"{self.facts['variant']}.{name}.log")
            with open(log, "w", encoding="utf-8") as f:
                f.write(parts.get(name, output))
            accelerator = self.facts["params"].get("accelerator", "cpu")
            status, diagnosis, hint, facts = verdict(name, code, output, limit, wall, accelerator)
            if status == "timeout":
                diagnosis = f"no result within the {limit} s of its group ({', '.join(names)})"
            try:
                parsed = parse_results(output).get(name)
            except ValueError:
                parsed = None
            seconds = float(parsed.get("seconds", wall)) if parsed else wall
            self._land(self._result(name, status, diagnosis, hint, facts, seconds, log))

    def need_skip(self, need):
        """(diagnosis, facts) of a skip for ``need`` where it ran and did not pass (as the in-image runner words
        it: the root check that failed), else None."""
        got = self.outcomes.get(need)
        if got is None or got["status"] == "passed":
            return None
        root = got["facts"].get("failed_need") if got["status"] == "skipped" else None
        if root:
            diagnosis = f"{root} failed"
        elif got["status"] == "failed":
            root, diagnosis = need, f"{need} failed"
        else:
            diagnosis = f"{need} was {got['status']} ({got['diagnosis']})"
        facts = {"need": need, "failed_need": root}
        if root:
            cause = self.outcomes.get(root) or {}
            facts.update(need_diagnosis=cause.get("diagnosis"), need_hint=cause.get("hint"))
        return diagnosis, facts

    def serve(self):
        """The serve step: skipped where its need (tiny-model) did not pass or the variant's GPU is not here,
        else the model (made once, as tiny-model made it), the server (``serving.observe``) and its judgement."""
        spec = dict(self.facts["serve"])
        started = time.monotonic()
        log = os.path.join(self.logs, f"{self.facts['variant']}.{serving.CHECK}.log")
        skipped = self.need_skip("tiny-model")
        if skipped is not None:
            return self._land(self._result(serving.CHECK, "skipped", skipped[0], "", skipped[1], 0.0, None))
        accelerator = self.facts["params"].get("accelerator", "cpu")
        if accelerator != "cpu" and attached_gpu(accelerator) is None:
            why = f"no GPU visible: the server of a {accelerator} variant needs one"
            return self._land(self._result(serving.CHECK, "skipped", why, "", {}, 0.0, None))
        proc = self.children.start([*self_argv(), "model"], self.env)
        try:
            out, _ = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            serving.kill_group(proc.pid)
            out, _ = proc.communicate()
        self.children.done(proc)
        text = out.decode("utf-8", "replace")
        model = next((line[len(MODEL_MARK) :].strip() for line in text.splitlines() if line.startswith(MODEL_MARK)), "")
        if not model:
            with open(log, "w", encoding="utf-8") as f:
                f.write(text)
            tail = " | ".join(text.strip().splitlines()[-2:])
            why = f"making the tiny model for the server fails (exit {proc.returncode}): {tail}"
            seconds = round(time.monotonic() - started, 1)
            return self._land(self._result(serving.CHECK, "failed", why, "read the log", {}, seconds, log))
        spec["model"] = model
        # The warm start must be ready before the serve check's own timeout, as in containers.
        deadline = started + self.timeouts.get(serving.CHECK, spec["ready_timeout_s"]) - compilecache.WARM_MARGIN_S
        try:
            seen = serving.observe(spec, log, self.env, deadline=deadline)
            status, diagnosis, hint, facts = serving.judge(seen, spec, serving.reference_tokens(self.outcomes))
        except Exception:  # the step fails with it, as a crashed check does; the report is still written
            text = traceback.format_exc()
            with open(log, "a", encoding="utf-8") as f:
                f.write("\n" + text)
            status, diagnosis, hint, facts = "failed", f"the check crashed: {last_error_line(text)}", "read the log", {}
        seconds = round(time.monotonic() - started, 1)
        self._land(self._result(serving.CHECK, status, diagnosis, hint, facts, seconds, log))

    def run(self):
        """Every group (up to this machine's CPUs at once, longest first as planned), then serve; the results in
        the plan's report order, a failure that follows from another's as its consequence (``rootcause``)."""
        pending = self.pending
        pending[:] = [list(g) for g in self.facts["groups"]]
        errors = []

        def work():
            while True:
                with self.lock:
                    if not pending or errors:
                        return
                    names = pending.pop(0)
                try:
                    self.group(names)
                except BaseException as exc:  # re-raised in the main thread
                    with self.lock:
                        errors.append(exc)
                    return

        workers = max(1, min(os.cpu_count() or 1, len(pending)))
        threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)  # short joins: a signal reaches the main thread at once
        if errors:
            raise errors[0]
        names = [c["name"] for c in self.facts["checks"]]
        if serving.CHECK in names:
            self.serve()
        # Failures that follow from another group's, as the host reports them for a container (one definition).
        # In the host's order: a hidden skip made a failure first, then consequences.
        return rootcause.consequences([unhidden(self.outcomes[n], names) for n in names if n in self.outcomes])


def shorten(text, width=100):
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def tabulate_simple(rows, headers):
    """``tabulate(rows, headers)``'s default ("simple") layout for text cells: columns left-aligned, each as wide
    as its widest cell or its header plus 2, two spaces between, a dashed rule under the header."""
    widths = [max([len(h) + 2] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: B905 (Python 3.9)

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def ok(results):
    return all(r["status"] in ("passed", "skipped") for r in results)


def table(results, wall=None):
    """The summary ``tools/matrix test`` prints (``matrixtool.report.table`` of these checks); ``wall``: the run's
    wall time in seconds (None: not timed)."""

    def name(r):
        return f"{r['variant']}/{r['check']}" + ("" if r["profile"] == DEFAULT_PROFILE else f"[{r['profile']}]")

    parts = []
    if results:
        rows = [
            [r["variant"], r["profile"], r["check"], r["status"] if r["status"] in ("passed", "skipped") else
             r["status"].upper(), f"{r['seconds']:.1f} s", shorten(r["diagnosis"])]
            for r in results
        ]  # fmt: skip
        parts.append(tabulate_simple(rows, ["variant", "profile", "check", "status", "time", "diagnosis"]))
        for r in results:
            if r["status"] not in ("passed", "skipped"):
                parts.append(
                    f"{name(r)}: {r['status']}\n  diagnosis: {r['diagnosis']}\n  fix: {r['hint']}"
                    + (f"\n  log: {r['log']}" if r["log"] else "")
                )
    skipped = {}
    for r in results:
        if r["status"] == "skipped":
            skipped.setdefault(r["diagnosis"].split(" (")[0].split(";")[0], []).append(name(r))
    for reason, names in skipped.items():
        parts.append(f"skipped ({reason}): {', '.join(names)}")
    if results:
        parts.append(f"suite: {', '.join(dict.fromkeys(r['suite'] for r in results))}")
    total = sum(r["seconds"] for r in results)
    counts = {s: sum(1 for r in results if r["status"] == s) for s in ("passed", "failed", "timeout", "skipped")}
    timed = f"checks' times summed {total:.0f} s"
    if wall is not None:
        timed = f"smoke {wall:.0f} s wall ({timed})"
    parts.append(
        ("OK" if ok(results) else "FAILED")
        + f": {counts['passed']} passed, {counts['failed']} failed, {counts['timeout']} timeout, "
        f"{counts['skipped']} skipped; {timed}"
    )
    return "\n\n".join(parts)


def to_json(results, wall=None):
    """The ``--json`` document of ``tools/matrix test`` (``matrixtool.report.to_json``: schema version 1); ``wall``
    as ``table``."""
    checks = [dict(r, seconds=round(r["seconds"], 1)) for r in results]
    return {"schema_version": JSON_SCHEMA_VERSION, "ok": ok(results), "builds": [], "checks": checks,
            "errors": {}, "skipped": {}, "smoke_wall_seconds": None if wall is None else round(wall, 1),
            "checks_seconds_summed": round(sum(r["seconds"] for r in results), 1)}  # fmt: skip


def junit_xml(results):
    """The JUnit XML of ``matrixtool.report.write_junit`` for these checks (one suite for the variant)."""
    root = ET.Element("testsuites", name="vllm-image-matrix")
    for variant in dict.fromkeys(r["variant"] for r in results):
        mine = [r for r in results if r["variant"] == variant]
        suite = ET.SubElement(root, "testsuite", name=variant, tests=str(len(mine)))
        props = ET.SubElement(suite, "properties")
        for name in dict.fromkeys(r["suite"] for r in mine):
            ET.SubElement(props, "property", name="suite", value=name)
        counts = {"failures": 0, "errors": 0, "skipped": 0}
        for r in mine:
            classname = f"smoke.{variant}" + ("" if r["profile"] == DEFAULT_PROFILE else f".{r['profile']}")
            case = ET.SubElement(
                suite, "testcase", name=r["check"], classname=classname, time=str(round(r["seconds"], 3))
            )
            if r["status"] == "failed":
                ET.SubElement(case, "failure", message=r["diagnosis"], type="failed")
                out = ET.SubElement(case, "system-out")
                out.text = f"fix: {r['hint']}\nimage: {r['image']}\nprofile: {r['profile']}\nlog: {r['log']}"
                counts["failures"] += 1
            elif r["status"] == "timeout":
                ET.SubElement(case, "error", message=r["diagnosis"], type="timeout")
                counts["errors"] += 1
            elif r["status"] == "skipped":
                ET.SubElement(case, "skipped", message=r["diagnosis"])
                counts["skipped"] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
    return ET.tostring(root, encoding="unicode")


def write(path, text):
    """``text`` to ``path`` whole (a temporary file renamed over it; a stream, ``streams.is_stream``, is written in
    place: a FIFO, a device, ``/dev/stdout`` redirected to a file)."""
    if streams.is_stream(path) or (os.path.exists(path) and not os.path.isfile(path)):
        if not streams.write_to_own_fd(path, text.encode("utf-8")):  # /dev/stdout: through fd 1, in order
            with open(path, "a", encoding="utf-8") as f:  # "a": a stdout redirected to a file is not truncated
                f.write(text)
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".vllm-smoke-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _raise_interrupted(signum, frame):
    raise Interrupted(EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED)


def _unwritable(path):
    """Why the report ``path`` cannot be written (a message), or None: '-' is stdout; an existing folder is
    refused, as is a non-regular file other than a FIFO or character device (a pipe, ``/dev/stdout``); a new
    file needs a writable folder."""
    if path == "-":
        return None
    if os.path.isdir(path):
        return f"cannot write {path}: it is a folder; name a file"
    if os.path.exists(path) and not os.path.isfile(path):
        mode = os.stat(path).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
            return f"cannot write {path}: it is no regular file, FIFO or character device; name a file"
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        return f"cannot write {path}: {folder} is no writable folder; name a file in one"
    return None


def _unwritable_folder(folder):
    """Why no file can be made in ``folder`` (the OS's reason), or None: ``os.access`` and then a probe file
    (root passes ``os.access`` where the file system still refuses, as in ``/proc``)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return "no write permission"
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".vllm-smoke-probe-"):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def _quiet_stdout():
    """After a closed pipe (``| head``): stdout points at /dev/null so the interpreter's final flush prints
    nothing (the signal module's "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv):
    """The bundle's command line (``argv`` without the program): the exit status. A reader that closes stdout
    early (``| head``) ends nothing early: the run's children are ended as always and its status returned."""
    try:
        return _main(argv)
    except BrokenPipeError:  # stderr's reader went: the run (its children ended) had no result anyone saw
        _quiet_stdout()
        return EXIT_SMOKE


def _main(argv):
    try:
        args = parse_args(argv)
        facts = load_facts()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.facts:
        try:
            print(json.dumps(facts, indent=1, sort_keys=True), flush=True)
        except BrokenPipeError:
            _quiet_stdout()
        return EXIT_OK
    for path in [p for p in (args.json_file, args.junit) if p]:
        why = _unwritable(path)
        if why:
            print(f"error: {why}", file=sys.stderr)
            return EXIT_USAGE
    if args.logs and not (os.path.isdir(args.logs) or not os.path.lexists(args.logs)):
        print(f"error: --logs {args.logs} is no folder; name a writable folder", file=sys.stderr)
        return EXIT_USAGE
    env = dict(os.environ)
    own_work = not env.get("MATRIX_SMOKE_DIR")
    work = env.get("MATRIX_SMOKE_DIR") or tempfile.mkdtemp(prefix="vllm-smoke-")
    env["MATRIX_SMOKE_DIR"] = work
    env.setdefault("MATRIX_MODEL_DIR", os.path.join(work, "tiny-llama"))
    logs = args.logs or os.path.join(work, "logs")
    for folder, what in ((work, "MATRIX_SMOKE_DIR"), (logs, "--logs")):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            print(f"error: {what} {folder}: {exc}; name a writable folder", file=sys.stderr)
            return EXIT_USAGE
        why = _unwritable_folder(folder)
        if why:
            print(f"error: {what} {folder} is not writable ({why}); name a writable folder", file=sys.stderr)
            return EXIT_USAGE
    image = args.image or f"host:{sys.executable}"
    piped = []  # stdout's reader went (``| head``): nothing more is printed there, the run goes on

    def out(text, flush=False):
        if piped:
            return
        try:
            print(text, flush=flush)
        except BrokenPipeError:
            piped.append(True)
            _quiet_stdout()

    def on_result(r):
        print(f"[{r['variant']}] {r['check']}: {r['status']} ({r['seconds']:.1f} s) {r['diagnosis']}", file=sys.stderr)
        if args.stream_results:
            out(CHECK_MARK + json.dumps(r, default=str), flush=True)

    names = ", ".join(c["name"] for c in facts["checks"])
    print(f"[{facts['variant']}] smoke checks in {image} (bundle): {names}; logs in {logs}", file=sys.stderr)
    suite = Suite(facts, env=env, logs=logs, image=image, on_result=on_result)
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGINT)}
    started = time.monotonic()
    try:
        results = suite.run()
    except Interrupted as exc:
        suite.stop()
        print("interrupted: every check process was ended", file=sys.stderr)
        return exc.code
    finally:
        suite.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
        if own_work and args.logs:  # the folder made here holds nothing asked for (the logs are elsewhere)
            shutil.rmtree(work, ignore_errors=True)
    wall = time.monotonic() - started
    code = EXIT_OK if ok(results) else EXIT_SMOKE
    document = json.dumps(to_json(results, wall), indent=2, default=str)
    failed = []  # (path, OSError) of a report that could not be written: named after the table
    if args.junit:
        try:
            write(args.junit, junit_xml(results))
        except OSError as exc:
            failed.append((args.junit, exc))
    if args.json_file == "-":  # the document alone on stdout (last in a pod's log), the table for people on stderr
        print("\n" + table(results, wall), file=sys.stderr, flush=True)
        out(document, flush=True)
    else:
        if args.json_file:
            try:
                write(args.json_file, document)
            except OSError as exc:
                failed.append((args.json_file, exc))
        out("\n" + table(results, wall), flush=True)
    for path, exc in failed:
        print(f"error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
    return EXIT_USAGE if failed else code
