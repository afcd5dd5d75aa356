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
import sys
import tempfile
import time
from types import FrameType
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple

from . import factshape
from .children import PACKAGE
from .reports import junit_xml, ok, table, to_json, write
from .suite import Suite

BUNDLE_FACTS = "bundle_facts.json"
# vLLM's option for the share of the GPU's memory its engine takes (the bundle's facts carry the share asked for).
GPU_MEMORY_OPTION = "--gpu-memory-utilization"
# A line per result on stdout with --stream-results (``matrixtool`` reads them as progress).
CHECK_MARK = "MATRIX-CHECK "
FACTS_FORMAT = 1
EXIT_OK, EXIT_USAGE, EXIT_SMOKE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 2, 7, 130, 143


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived: every child group is killed on the way out; ``code`` is the exit status."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class UsageError(Exception):
    """Bad arguments or a package without facts (exit 2)."""


def load_facts() -> dict[str, Any]:
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
    checked: dict[str, Any] = facts
    return checked


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
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
    parser.add_argument(
        "--gpu-memory-utilization",
        dest="gpu_memory_utilization",
        type=_fraction,
        default=None,
        metavar="F",
        help="share of the GPU's memory the server asks for, above 0 and at most 1 (default: the bundle's, 0.2; "
        "vLLM's own default, 0.9, leaves a shared GPU nearly full)",
    )
    parser.add_argument("--stream-results", action="store_true", help=argparse.SUPPRESS)

    def error(message: str) -> NoReturn:
        raise UsageError(f"{message}; see --help")

    parser.error = error  # type: ignore[method-assign]
    return parser.parse_args(argv)


def _fraction(text: str) -> float:
    """``--gpu-memory-utilization``'s value: a number above 0 and at most 1 (argparse turns ValueError into its
    message)."""
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError(text)
    return value


_fraction.__name__ = "share (above 0, at most 1)"  # argparse names the type in its message


def with_gpu_share(facts: Dict[str, Any], fraction: Optional[float]) -> Dict[str, Any]:
    """``facts`` with the server's ``--gpu-memory-utilization`` set to ``fraction`` (None: as the bundle has it).
    Raises UsageError where the variant's server uses no GPU (its facts name no share)."""
    if fraction is None:
        return facts
    serve = dict(facts["serve"])
    if serve.get("gpu_memory_utilization") is None:
        raise UsageError(
            f"--gpu-memory-utilization: the {facts['variant']} variant's server uses no GPU; leave the flag out"
        )
    options = list(serve["options"])
    at = options.index(GPU_MEMORY_OPTION) if GPU_MEMORY_OPTION in options else None
    if at is None or at + 1 >= len(options):
        options += [GPU_MEMORY_OPTION, str(fraction)]
    else:
        options[at + 1] = str(fraction)
    serve.update(options=options, gpu_memory_utilization=fraction)
    return dict(facts, serve=serve)


def _raise_interrupted(signum: int, frame: Optional[FrameType]) -> NoReturn:
    raise Interrupted(EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED)


def _unwritable(path: str) -> str | None:
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


def _unwritable_folder(folder: str) -> str | None:
    """Why no file can be made in ``folder`` (the OS's reason), or None: ``os.access`` and then a probe file
    (root passes ``os.access`` where the file system still refuses, as in ``/proc``)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return "no write permission"
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".vllm-smoke-probe-"):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def _quiet_stdout() -> None:
    """After a closed pipe (``| head``): stdout points at /dev/null so the interpreter's final flush prints
    nothing (the signal module's "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str]) -> int:
    """The bundle's command line (``argv`` without the program): the exit status. A reader that closes stdout
    early (``| head``) ends nothing early: the run's children are ended as always and its status returned."""
    try:
        return _main(argv)
    except BrokenPipeError:  # stderr's reader went: the run (its children ended) had no result anyone saw
        _quiet_stdout()
        return EXIT_SMOKE


class Output:
    """stdout for the run's lines: once its reader went (``| head``), nothing more is printed there and the run
    goes on."""

    def __init__(self) -> None:
        self.piped = False

    def print(self, text: str, flush: bool = False) -> None:
        if self.piped:
            return
        try:
            print(text, flush=flush)
        except BrokenPipeError:
            self.piped = True
            _quiet_stdout()


def _refused(args: argparse.Namespace) -> str | None:
    """Why the reports or the log folder asked for cannot be written (refused before anything runs), or None."""
    for path in [p for p in (args.json_file, args.junit) if p]:
        why = _unwritable(path)
        if why:
            return why
    if args.logs and not (os.path.isdir(args.logs) or not os.path.lexists(args.logs)):
        return f"--logs {args.logs} is no folder; name a writable folder"
    return None


def _folders(env: Dict[str, str], logs: str | None) -> tuple[str, str]:
    """(work folder, log folder), made: ``MATRIX_SMOKE_DIR`` (else a new temporary folder, set in ``env``) and
    ``logs`` (else ``logs`` in the work folder); ``MATRIX_MODEL_DIR`` defaults to the work folder's tiny-llama.
    Raises UsageError for a folder that cannot be made or written."""
    work = env.get("MATRIX_SMOKE_DIR") or tempfile.mkdtemp(prefix="vllm-smoke-")
    env["MATRIX_SMOKE_DIR"] = work
    env.setdefault("MATRIX_MODEL_DIR", os.path.join(work, "tiny-llama"))
    logs = logs or os.path.join(work, "logs")
    for folder, what in ((work, "MATRIX_SMOKE_DIR"), (logs, "--logs")):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{what} {folder}: {exc}; name a writable folder") from None
        why = _unwritable_folder(folder)
        if why:
            raise UsageError(f"{what} {folder} is not writable ({why}); name a writable folder")
    return work, logs


def _run(suite: Suite) -> List[Dict[str, Any]]:
    """``suite``'s results; on SIGTERM or SIGINT every child ends and Interrupted is raised."""
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return suite.run()
    except Interrupted:
        suite.stop()
        print("interrupted: every check process was ended", file=sys.stderr)
        raise
    finally:
        suite.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _report(args: argparse.Namespace, results: List[Dict[str, Any]], wall: float, out: Output) -> int:
    """Print the table and write the reports asked for; the exit status (2 where a report could not be written:
    named after the table)."""
    code = EXIT_OK if ok(results) else EXIT_SMOKE
    document = json.dumps(to_json(results, wall), indent=2, default=str)
    # (path, OSError) of a report that could not be written: named after the table
    failed: List[Tuple[str, OSError]] = []
    if args.junit:
        try:
            write(args.junit, junit_xml(results))
        except OSError as exc:
            failed.append((args.junit, exc))
    if args.json_file == "-":  # the document alone on stdout (last in a pod's log), the table for people on stderr
        print("\n" + table(results, wall), file=sys.stderr, flush=True)
        out.print(document, flush=True)
    else:
        if args.json_file:
            try:
                write(args.json_file, document)
            except OSError as exc:
                failed.append((args.json_file, exc))
        out.print("\n" + table(results, wall), flush=True)
    for path, error in failed:
        print(f"error: cannot write {path}: {error.strerror or error}", file=sys.stderr)
    return EXIT_USAGE if failed else code


def _print_facts(facts: Dict[str, Any]) -> int:
    try:
        print(json.dumps(facts, indent=1, sort_keys=True), flush=True)
    except BrokenPipeError:
        _quiet_stdout()
    return EXIT_OK


def _main(argv: Sequence[str]) -> int:
    try:
        args = parse_args(argv)
        facts = with_gpu_share(load_facts(), args.gpu_memory_utilization)
        if args.facts:
            return _print_facts(facts)
        why = _refused(args)
        if why:
            raise UsageError(why)
        env = dict(os.environ)
        own_work = not env.get("MATRIX_SMOKE_DIR")
        work, logs = _folders(env, args.logs)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    image = args.image or f"host:{sys.executable}"
    out = Output()

    def on_result(r: Dict[str, Any]) -> None:
        print(f"[{r['variant']}] {r['check']}: {r['status']} ({r['seconds']:.1f} s) {r['diagnosis']}", file=sys.stderr)
        if args.stream_results:
            out.print(CHECK_MARK + json.dumps(r, default=str), flush=True)

    names = ", ".join(c["name"] for c in facts["checks"])
    print(f"[{facts['variant']}] smoke checks in {image} (bundle): {names}; logs in {logs}", file=sys.stderr)
    started = time.monotonic()
    try:
        results = _run(Suite(facts, env=env, logs=logs, image=image, on_result=on_result))
    except Interrupted as exc:
        return exc.code
    finally:
        if own_work and args.logs:  # the folder made here holds nothing asked for (the logs are elsewhere)
            shutil.rmtree(work, ignore_errors=True)
    return _report(args, results, time.monotonic() - started, out)
