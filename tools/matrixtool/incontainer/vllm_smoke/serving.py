"""What the ``serve`` check reads: the phases of vLLM's start-up log, how the stop contract's stream ended, the
errors of a shutdown, and the judgement of what a server did (``judge``: the result, from what ``server.observe``
saw, the keys of ``matrixtool.smoke.serve.Observed``). The process-level stop contract: SIGTERM to the server
during a streaming request, exit 0 or -15 (the signal's own default action) within the grace, and no process of its
group left once it exited (``children.group_members``).

Standard library only, Python >= 3.9: the container check (``matrixtool.smoke.serve``) and the bundle's
process-level check (``server``) read alike."""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Dict, List, Mapping, Tuple

from . import compilecache, errortext, servediag
from .shutdown import UNCLEAN_STOP, rooted_stop, stop_notes
from .warmshare import warm_share

CHECK = "serve"
# Lines of vLLM's start-up log that open a phase (time to ready, per phase); the container check reads them too.
PHASES = (
    ("cli", "non-default args"),
    ("engine core", "Initializing a V1 LLM engine"),
    ("model load", "Starting to load model"),
    ("compile/warm-up", "Warming up model"),
    ("api server", "Starting vLLM server"),
)
# vLLM's error lines while it stops on SIGTERM (the engine core is torn down under the API server's output
# handler): reported, not failed on, as the contract is the exit code and the time.
SHUTDOWN_ERRORS = ("output_handler failed", "EngineDeadError", "leaked shared_memory")
# Requests of ``serve_probe.probe`` that the engine finishes (completion, stream, chat).
GENERATION_REQUESTS = 3


def phases_seen(log: str, seconds: float, seen: Any) -> None:
    """Record in ``seen`` each phase whose opening line is in ``log`` for the first time at ``seconds``."""
    for name, marker in PHASES:
        if name not in seen and marker in log:
            seen[name] = round(seconds, 1)


def _stream_error(chunks: List[Any]) -> str:
    """The message of an error a stream's chunks carry (vLLM's OpenAI server ends a request its engine lost with a
    ``data: {"error": ...}`` chunk, then ``[DONE]``), "" where none does."""
    for chunk in chunks:
        try:
            data = _loads(str(chunk))
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("error"):
            error = data["error"]
            return str(error.get("message") or error) if isinstance(error, dict) else str(error)
    return ""


def stream_outcome(stream: Any) -> str:
    """How the stop contract's stream ended, in words (the container check's too): ``completed`` only where no chunk
    carries an error (a request cut by a dead engine still ends with ``[DONE]``)."""
    chunks = len(stream.get("chunks") or [])
    error = _stream_error(list(stream.get("chunks") or []))
    if stream.get("done") and error:
        return f"cut after {chunks} chunks by the server's error chunk ({error[:200]}), then [DONE]"
    if stream.get("done"):
        return f"completed ([DONE] after {chunks} chunks)"
    if stream.get("error"):
        return f"cut after {chunks} chunks: {stream['error']}"
    return f"closed after {chunks} chunks without [DONE]"


def shutdown_errors(log: str) -> List[str]:
    """The lines after vLLM's "[shutdown]" that name one of ``SHUTDOWN_ERRORS`` (first 3)."""
    _, _, after = log.partition("[shutdown]")
    return [line.strip() for line in after.splitlines() if any(e in line for e in SHUTDOWN_ERRORS)][:3]


def _loads(text: str) -> Any:
    """``json.loads``; a body nested past the interpreter's recursion limit is unreadable too (ValueError), as
    the host's ``core.jsontext.loads`` reads it: an answer never crashes its judge."""
    import json

    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def choice(answer: Mapping[str, Any]) -> Dict[str, Any]:
    """The first choice of a JSON answer's body ({} when unreadable)."""
    try:
        return dict(_loads(answer.get("body") or "{}")["choices"][0])
    except (ValueError, KeyError, IndexError, TypeError):
        return {}


def streamed(stream: Mapping[str, Any]) -> Tuple[str, List[int]]:
    """The text and token ids of a streamed completion, its chunks joined."""
    text, tokens = "", []
    for chunk in stream.get("chunks") or []:
        try:
            part = _loads(chunk)["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            continue
        text += part.get("text") or ""
        tokens += list(part.get("token_ids") or [])
    return text, tokens


def counted_requests(metrics: Any) -> int:
    """The finished requests vLLM's /metrics counts (``vllm:request_success_total``, every finished_reason)."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("vllm:request_success_total"):
            with contextlib.suppress(ValueError, IndexError):
                total += float(line.rsplit(" ", 1)[1])
    return int(total)


def root_cause(log: str) -> str:
    """The root-cause line of a server log (``errortext.root_cause``), else its last line."""
    found = errortext.root_cause(log)
    if found:
        return found
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1] if lines else "no log"


def stop_problems(stop: Mapping[str, Any]) -> List[str]:
    """The process-level stop contract's failures: no stream in flight, an exit other than 0/-15, no exit within
    the grace (SIGKILL), a stop slower than the grace, processes of the server's group left after its exit."""
    out = []
    if not stop.get("in_flight"):
        out.append("no streaming request was in flight when SIGTERM was sent")
    code, grace = stop.get("exit_code"), stop.get("grace_s")
    if stop.get("killed_after_grace"):
        out.append(
            f"SIGTERM during a stream: no exit within the {grace} s grace (SIGKILL); the stream {stop.get('stream')}"
        )
    elif code not in STOP_EXITS:
        out.append(
            f"SIGTERM during a stream: exit {code} after {stop.get('seconds')} s; the stream {stop.get('stream')}"
        )
    elif float(stop.get("seconds") or 0) > float(grace or 0):
        out.append(f"the server took {stop.get('seconds')} s to exit on SIGTERM, over the {grace} s grace")
    left = stop.get("left_in_group") or []
    if left:
        named = ", ".join(f"{p['pid']} {p['cmd'][:60]}" for p in left[:3])
        out.append(f"{len(left)} process(es) of the server's group left after it exited ({named})")
    return out


API_KEY_ENV = "VLLM_API_KEY"


def unauthorized(probes: Mapping[str, Any], env: Mapping[str, str], argv: Any) -> Any:
    """(problem, fix) where a route answered 401 because the server demands an API key (vLLM answers every
    ``/v1`` route 401 without ``Authorization: Bearer <key>`` once ``VLLM_API_KEY`` or ``--api-key`` is given,
    ``vllm/entrypoints/openai/api_server.py``): the routes, where the key came from (``env``: the server's
    environment, the image's ``ENV`` and the profile's; ``argv``: its command line) and the fix. None: no 401."""
    routes = [k for k, a in probes.items() if isinstance(a, Mapping) and a.get("status") == 401]
    if not routes:
        return None
    words = [str(a) for a in argv or []]
    sources = []
    if env.get(API_KEY_ENV):
        sources.append(f"{API_KEY_ENV} is set in the server's environment (the image's ENV, or the deployment's)")
    if any(w == "--api-key" or w.startswith("--api-key=") for w in words):
        sources.append("--api-key is in the server's command line")
    where = "; ".join(sources) or f"neither {API_KEY_ENV} nor --api-key is visible to this check: a wrapper sets it"
    problem = (
        f"{', '.join(routes)} answered 401 Unauthorized: the server demands an API key ({where}), and a client "
        "without it (this check's, a probe's) is refused"
    )
    fix = (
        f"do not bake the key into the image (`docker inspect` shows an ENV to anyone who pulls it): remove "
        f"`ENV {API_KEY_ENV}` / `--api-key` from the image and give it at deploy time (a Kubernetes Secret as "
        f"{API_KEY_ENV}, `docker run -e {API_KEY_ENV}`); clients send `Authorization: Bearer <key>`"
    )
    return problem, fix


def judge(seen: Mapping[str, Any], spec: Mapping[str, Any], expected_tokens: Any) -> Any:
    """(status, diagnosis, hint, facts) of one server run, asserting what ``matrixtool.smoke.serve.check.judge``
    asserts of a container: ready, the routes' answers (``answer_problems``; ``expected_tokens``: offline-generate's
    eager tokens, None: not compared, said so); then the process-level stop contract (``stop_problems``) and the
    warm start (``warm_problems``). A cache folder that could not be made (``cache_error``) fails it as class 31."""
    facts = {"ready_s": seen.get("ready_s"), "phases": dict(seen.get("phases") or {}), "argv": seen.get("argv")}
    start = process_start(seen.get("argv") or [])
    facts["start"] = start
    log = seen.get("log") or ""
    if seen.get("cache_error"):
        name, cause, diagnosis, fix = seen["cache_error"]
        facts.update(failure_class=compilecache.COMPILE_CACHE, warm={"failure": name, "cause": cause})
        return "failed", f"no server started: {name}: {diagnosis}: {cause}", fix, facts
    if seen.get("ready_s") is None:
        cause = root_cause(log)
        facts["log_tail"] = log[-LOG_TAIL:]
        if seen.get("exit_code") is not None:
            facts["exit_code"] = seen["exit_code"]
            return (
                "failed",
                f"the server exited ({seen['exit_code']}) before it was ready: {cause}",
                "read the server's log (the root cause is logged before vLLM's wrappers)",
                facts,
            )
        return (
            "failed",
            f"/health did not answer 200 within {spec['ready_timeout_s']} s (last log line: {cause})",
            "read the server's log; a probe must outlast a cold start (compile) on this machine",
            facts,
        )
    probes = seen.get("probes") or {}
    if not probes:
        return "failed", "the server was ready but no request was sent", "", facts
    pinned = str(spec.get("vllm_version") or "").split("+")[0]
    problems = answer_problems(probes, spec["model"], expected_tokens, pinned, facts)
    hints: List[str] = []
    key = unauthorized(probes, seen.get("env") or {}, seen.get("argv"))
    if key is not None:  # after the failed route's own words, which come first
        problems.insert(1, key[0])
        hints.append(key[1])
    stop = dict(seen.get("stop") or {})
    facts["stop"] = stop
    # The engine's death is the root (class 44); an exit, a SIGKILL after the grace or a slow stop follows from it.
    follows = ("SIGTERM during", "the server took")
    stopped, died = rooted_stop(stop, stop_problems(stop), lambda p: p.startswith(follows))
    if died:
        facts.setdefault("failure_class", UNCLEAN_STOP)
    problems += stopped
    hints += died
    warm = warm_problems(seen, facts, problems, hints)
    fraction = spec.get("gpu_memory_utilization")
    if fraction is not None:  # a GPU host: the share asked for, and what the warm start saved
        facts["gpu_memory_utilization"] = fraction
        warm += warm_share(seen, facts) + f"; {fraction} of the GPU's memory (--gpu-memory-utilization)"
    budget = spec.get("ready_budget_s")
    if budget is not None and seen["ready_s"] > float(budget):
        facts["ready_budget_s"] = budget
        problems.append(f"ready after {seen['ready_s']:.0f} s, over its ready_budget of {float(budget):.0f} s")
    if problems:
        return "failed", "; ".join(problems), "; ".join(hints) or "read the server's log", facts
    summary = (
        f"started in the {start['form']} form, ready in {seen['ready_s']:.0f} s; models, greedy completion"
        f"{' == offline-generate' if expected_tokens is not None else ' (no offline-generate tokens to compare)'}, "
        f"stream, chat, metrics ({facts['metrics_requests']}), version {facts['version']}; stop: exit "
        f"{stop.get('exit_code')} in {stop.get('seconds')} s, stream {stop.get('stream')}, no process left"
        f"{stop_notes(stop)}"
    )
    return "passed", summary + warm, "", facts


def process_start(argv: List[Any]) -> Dict[str, str]:
    """How the bundle's server (a child process, ``server.server_argv``) was started: the ``vllm`` form (vLLM's
    console script) or ``cli-module`` (``python -m vllm.entrypoints.cli.main``, no console script found); no image
    config is involved (the host's serve check reads it: ``matrixtool.smoke.serve.start``)."""
    words = [str(a) for a in argv]
    program = words[: words.index("serve")] if "serve" in words else words[:1]
    form = "cli-module" if "-m" in program else "vllm"
    return {"form": form, "how": f"`{' '.join(program)} serve MODEL ...` as a child process"}


def answer_problems(
    probes: Mapping[str, Any], model: str, expected_tokens: Any, vllm_version: str, facts: Dict[str, Any]
) -> List[str]:
    """The routes' answers (``serve_probe.probe``'s) against what they must say, for the host's container check
    (``matrixtool.smoke.serve.check``) and the bundle's process alike: every route 200 (the first that is not, in
    words, comes first), /v1/models lists ``model``, greedy tokens == ``expected_tokens`` (None: not compared),
    stream == non-stream, chat content, /metrics counts the requests and names their routes (class 16), /version
    starts with ``vllm_version``. Returns the problems; records what was read in ``facts``."""
    problems = []
    for key, answer in probes.items():
        if answer.get("status") != 200:
            why = answer.get("error") or str(answer.get("body", ""))[:300]
            problems.append(f"{key} answered {answer.get('status')}: {why}")
            break
    models = []
    with contextlib.suppress(ValueError, KeyError, TypeError):
        models = [m["id"] for m in _loads(probes["models"]["body"])["data"]]
    facts["models"] = models
    if model not in models:
        problems.append(f"/v1/models lists {models}, not the served {model}")
    first = choice(probes.get("completion", {}))
    tokens = list(first.get("token_ids") or [])
    facts["tokens"] = tokens
    facts["expected_tokens"] = list(expected_tokens) if expected_tokens is not None else None
    if expected_tokens is not None and tokens != list(expected_tokens):
        problems.append(f"greedy tokens {tokens} differ from offline-generate's eager {list(expected_tokens)}")
    text, streamed_tokens = streamed(probes.get("stream", {}))
    if text != first.get("text") or streamed_tokens != tokens:
        wanted = first.get("text")
        problems.append(f"streamed {text!r} {streamed_tokens} differs from non-streamed {wanted!r} {tokens}")
    chat = choice(probes.get("chat", {})).get("message", {}) or {}
    facts["chat"] = chat.get("content")
    if not chat.get("content"):
        problems.append("/v1/chat/completions gave no content")
    before = counted_requests(str(probes.get("metrics_before", {}).get("body", "")))
    counted = counted_requests(str(probes.get("metrics", {}).get("body", ""))) - before
    facts["metrics_requests"] = counted
    if counted != GENERATION_REQUESTS:
        problems.append(f"/metrics counts {counted} finished requests, {GENERATION_REQUESTS} were sent")
    unlabelled = servediag.unlabelled_metrics(str(probes.get("metrics", {}).get("body", "")))
    if unlabelled is not None:  # class 16: every request counted under handler="none"
        facts["failure_class"] = servediag.WEB_STACK
        problems.append(f"{unlabelled[1]}; fix: {unlabelled[2]}")
    version = ""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        version = str(_loads(probes["version"]["body"])["version"])
    facts["version"] = version
    if not version.startswith(vllm_version):
        problems.append(f"/version is {version!r}, the variant pins {vllm_version}")
    return problems


def warm_problems(seen: Mapping[str, Any], facts: Dict[str, Any], problems: List[str], hints: List[str]) -> str:
    """The warm start of ``seen`` (``observe``'s) judged as the container check judges it
    (``compilecache.judge_warm``): its facts into ``facts`` (``warm``, ``cold_ready_s``; the cache folder's file
    system as ``warm.cache_filesystem``), what failed into ``problems`` and ``hints``; the summary's words ("" where
    none ran or it failed)."""
    warm = seen.get("warm")
    if not warm:
        return ""
    judged = compilecache.judge_warm(
        seen.get("log") or "",
        seen.get("ready_s"),
        warm,
        cold_listing=seen.get("cache_listing") or "",
        cache_root=seen.get("cache_root") or "",
    )
    facts.update(judged["facts"])
    if seen.get("cache_filesystem") and "skipped" not in warm:
        facts["warm"]["cache_filesystem"] = seen["cache_filesystem"]
    outcome, warm_log = judged["outcome"], warm.get("log") or ""
    if outcome == "error":
        problems.append(f"the warm start on the cold start's cache could not run: {warm['error']}")
    elif outcome == "not_ready":
        code = warm.get("exit_code")
        what = f"exited ({code})" if code is not None else "was not ready in time"
        problems.append(f"the warm start on the cold start's cache {what}: {root_cause(warm_log)}")
        facts["warm"]["log_tail"] = warm_log[-LOG_TAIL:]
        hints.append("read the warm start's log (after the cold start's in the serve log)")
    elif outcome == "not_reused":
        name, cause, diagnosis, fix = judged["failure"]
        facts["failure_class"] = compilecache.COMPILE_CACHE
        problems.append(f"the warm start did not reuse the compile cache ({name}): {diagnosis}: {cause!r}")
        hints.append(fix)
    return str(judged["summary"])


def reference_tokens(outcomes: Any) -> Any:
    """offline-generate's eager tokens for the first prompt from ``outcomes`` ({check: result dict}); its
    compiled tokens where only those ran; None when it did not pass."""
    got = outcomes.get("offline-generate") or {}
    if got.get("status") != "passed":
        return None
    for mode in ("eager", "compiled"):
        tokens = ((got.get("facts") or {}).get(mode) or {}).get("tokens")
        if tokens:
            return list(tokens[0])
    return None


# Exit statuses the stop contract accepts: 0 (a drained shutdown) or -15 (SIGTERM's default action, as
# ``subprocess`` reports a process ended by a signal).
STOP_EXITS = (0, -signal.SIGTERM)


LOG_TAIL = 4000  # characters of the server's log a diagnosis quotes at most
