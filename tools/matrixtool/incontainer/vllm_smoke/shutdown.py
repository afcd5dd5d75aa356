"""A stop judged by what vLLM logged (class 44): the ``[shutdown]`` lines of vLLM 0.32 read into causes, each clean
or not, so a stop that exits 0 in time with an engine that died under it fails, and a clean one that logged an
error says why it is clean.

Standard library only, Python >= 3.9: the container check and the bundle's server read alike."""

from __future__ import annotations

from typing import Any, Callable, List, Mapping, Tuple

# docs/failure-classes.md: a stop that exits 0 in time but whose log shows the engine died under the server.
UNCLEAN_STOP = 44
# vLLM 0.32's shutdown lines (vllm/v1/engine/core_client.py, utils.py, core.py), in the order a clean stop logs them.
_MANAGER_STOPPED = "[shutdown] MPClient: engine manager stopped"
_ENGINE_DIED = "[shutdown] MPClient: engine core exited unexpectedly"
_FATAL = "EngineCore encountered a fatal error"
_FORCE_KILLED = "[shutdown] Process manager: force killing remaining process"
_DRAINING = "[shutdown] EngineCore: draining in-flight requests"
_DRAINED = "[shutdown] EngineCore: request processing complete"
# The process manager's SIGTERM to the engine core, and the engine core's own first line on receiving it
# (vllm/v1/utils.py, vllm/v1/engine/core.py): a live engine core logs the second right after the first.
_SIGTERM_SENT = "[shutdown] Process manager: send sigterm to process EngineCore"
_ENGINE_STOPPING = "[shutdown] EngineCore:"
_TEARDOWN_DEAD = (
    "vLLM's own teardown: once the engine manager stopped, MPClient's cleanup cancels its output-socket task, whose "
    "`except asyncio.CancelledError` queues an EngineDeadError (vllm/v1/engine/core_client.py, "
    'process_outputs_socket) that AsyncLLM\'s output handler logs as "output_handler failed" when the event loop '
    "runs it before uvicorn's loop closes (a race: some stops log it, most do not); no request was cut"
)


def shutdown_verdict(log: str) -> List[Tuple[str, bool, str, str]]:
    """What vLLM's shutdown log (``log``, the server's whole log) shows beyond the exit code: one
    (name, clean, line, meaning) per cause found, in this order:

    - ``engine-died``: the engine core exited before the API server stopped it (MPClient's monitor saw it die: it was
      killed, by the OOM killer or a signal sent to every process, or it crashed): not clean;
    - ``engine-fatal``: the engine core's own fatal error during the stop: not clean;
    - ``drain-cut``: the drain outlived ``--shutdown-timeout`` and the engine core was SIGKILLed (its in-flight
      requests cut): clean for the exit contract, named (the stream's outcome says what the client got);
      ``teardown-slow`` where no request was left (its workers' exit was slow): clean, named;
    - ``sigterm-unanswered``: the engine core was sent its SIGTERM, logged no ``[shutdown] EngineCore:`` line and
      was force-killed by vLLM at the timeout (alive, its handler not run): clean for the exit contract, named;
    - ``teardown-engine-dead``: an EngineDeadError logged after the engine manager had stopped
      (``_TEARDOWN_DEAD``): clean, named.

    An EngineDeadError before the engine manager stopped (with no other cause) is ``engine-died`` too, and so is an
    engine core that was sent its SIGTERM and logged no ``[shutdown] EngineCore:`` line and was not force-killed
    (dead before the stop: a late EngineDeadError is then no teardown race). Empty: the
    stop logged none of these (vLLM 0.32's wording; before "[shutdown]" nothing is read)."""
    at = log.find("[shutdown]")
    if at < 0:
        return []
    lines = [line.strip() for line in log[at:].splitlines()]
    stopped = next((i for i, line in enumerate(lines) if _MANAGER_STOPPED in line), len(lines))
    out: List[Tuple[str, bool, str, str]] = []
    died = next((line for line in lines if _ENGINE_DIED in line), "")
    early_dead = next((line for line in lines[:stopped] if "EngineDeadError" in line), "")
    sent = next((line for line in lines if _SIGTERM_SENT in line), "")
    cut = next((line for line in lines if _FORCE_KILLED in line), "")
    # Sent its SIGTERM, the engine core logged nothing of its stop: it was dead already, and vLLM's monitor, which
    # stays quiet once the stop has begun, did not say so (seen: an engine core SIGKILLed at the stop, exit 0 in
    # 3.5 s, the stream in flight ended by [DONE] after 105 of 200 tokens). Unless vLLM force-killed it: its process
    # manager does that only to an engine core still alive at the timeout (vllm/v1/utils.py, shutdown), one whose
    # Python SIGTERM handler had not run (its main thread in one native call longer than the timeout, or a timeout
    # of 0: --shutdown-timeout 0, vLLM's default off ROCm, SIGKILLs it at once).
    silent = bool(sent) and not any(_ENGINE_STOPPING in line for line in lines)
    died = died or (sent if silent and not cut else "")
    if died or early_dead:
        out.append(
            (
                "engine-died",
                False,
                died or early_dead,
                "the engine core died before the API server stopped it (killed by a signal sent to every process, "
                "the OOM killer, or a crash): its in-flight requests were lost, not drained",
            )
        )
    fatal = next((line for line in lines if _FATAL in line), "")
    if fatal:
        out.append(("engine-fatal", False, fatal, "the engine core failed during the stop"))
    drained = any(_DRAINING in line for line in lines) and not any(_DRAINED in line for line in lines)
    forced = _forced(cut, silent, drained) if cut else None
    if forced is not None:
        out.append(forced)
    late = next((line for line in lines[stopped:] if "EngineDeadError" in line), "")
    if late and not (died or early_dead):
        out.append(("teardown-engine-dead", True, late, _TEARDOWN_DEAD))
    return out


def unclean_stop(stop: Mapping[str, Any]) -> List[str]:
    """The stop contract's failures from its log's causes (``stop["shutdown"]``, ``shutdown_verdict``'s tuples)."""
    return [f"the stop {meaning}: {line!r}" for _, clean, line, meaning in stop.get("shutdown") or [] if not clean]


# The fix of an engine core that died under the server (class 44), and how a stop failure it explains is marked.
DIED_HINT = (
    "read the server's log around its [shutdown] lines: an engine core that dies before the API server stops it was "
    "killed (the OOM killer, a signal sent to every process of the container) or crashed"
)
CONSEQUENCE = " (a consequence: the engine core died under the server)"


def rooted_stop(
    stop: Mapping[str, Any], broken: List[str], follows: Callable[[str], bool]
) -> Tuple[List[str], List[str]]:
    """(problems, hints) of a stop: where its log shows an unclean stop (``unclean_stop``), that root first, then
    ``broken`` (the caller's process-level stop failures) with each that ``follows`` from it (an exit code or a
    stop past the grace: seen, the API server hung once its engine core was killed, SIGKILLed after the grace)
    marked ``CONSEQUENCE``, and ``DIED_HINT``; else ``broken`` as it is and no hint. The container check and the
    bundle's server alike."""
    unclean = unclean_stop(stop)
    if not unclean:
        return list(broken), []
    return unclean + [p + CONSEQUENCE if follows(p) else p for p in broken], [DIED_HINT]


def stop_notes(stop: Mapping[str, Any]) -> str:
    """The named notes of a clean stop's log (``stop["shutdown"]``), for the summary ("" where none)."""
    names = [name for name, clean, _, _ in stop.get("shutdown") or [] if clean]
    return f" (logged on stop, clean: {', '.join(names)})" if names else ""


def _forced(cut: str, silent: bool, drained: bool) -> Tuple[str, bool, str, str]:
    """The cause of vLLM's force-kill of the engine core (``cut``: its line) at the timeout: its SIGTERM unanswered
    (``silent``: no ``[shutdown] EngineCore:`` line), its drain cut (``drained``: draining, never complete), else a
    slow teardown; each clean, named."""
    if silent:
        return (
            "sigterm-unanswered",
            True,
            cut,
            "the engine core, alive, logged nothing of its stop before vLLM SIGKILLed it at --shutdown-timeout "
            "(its SIGTERM handler had not run: a timeout of 0, or its main thread in one native call longer than "
            "the timeout, such as a forward step on a loaded CPU): requests still running were cut",
        )
    if drained:
        return (
            "drain-cut",
            True,
            cut,
            "the drain outlived --shutdown-timeout and vLLM SIGKILLed its engine core: requests still running "
            "were cut (raise --shutdown-timeout, below the pod's grace, where requests run longer)",
        )
    return (
        "teardown-slow",
        True,
        cut,
        "no request was left, but the engine core's teardown outlived --shutdown-timeout (its workers did not "
        "exit within the executor's 5 s grace: `Executor: workers still running after grace period`, seen "
        "on a loaded CPU) and vLLM SIGKILLed it",
    )
