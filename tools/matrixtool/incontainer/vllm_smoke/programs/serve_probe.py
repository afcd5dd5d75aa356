"""HTTP probes of a running ``vllm serve``: standard library only (Python >= 3.9), no judgement.

Run on the host against a published port, or in a client container that shares the server's network namespace
(a profile with no network): ``serve_probe.py health|probe|stream BASE_URL [JSON]`` prints one
``MATRIX-PROBE {json}`` line (``stream`` prints ``MATRIX-STREAM-FIRST`` once its first chunk is in, and creates
the file the JSON's ``_first_file`` names, if any).
The host judges what they return (``matrixtool.smoke.serve``).
"""

import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Mapping, Optional

PROBE_MARK = "MATRIX-PROBE "
FIRST_MARK = "MATRIX-STREAM-FIRST"


def call(base: str, path: str, body: Optional[Mapping[str, Any]] = None, timeout: float = 60.0) -> Dict[str, Any]:
    """One request: {"status": int | None, "body": str, "error": str | None, "seconds": float}; a POST when
    ``body`` (JSON-able) is given. Never raises for HTTP or connection errors."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, text, error = resp.status, resp.read().decode("utf-8", "replace"), None
    except urllib.error.HTTPError as exc:
        status, text, error = exc.code, exc.read().decode("utf-8", "replace"), None
    except Exception as exc:  # connection refused / reset, timeout: the probe reports, the host judges
        status, text, error = None, "", f"{type(exc).__name__}: {exc}"
    return {"status": status, "body": text, "error": error, "seconds": round(time.monotonic() - started, 3)}


def health(base: str) -> Dict[str, Any]:
    """GET /health with a 5 s timeout."""
    return call(base, "/health", timeout=5.0)


def completion_body(spec: Mapping[str, Any], stream: bool) -> Dict[str, Any]:
    """The /v1/completions request of ``spec`` (model, prompt, max_tokens): greedy, no early stop."""
    return {
        "model": spec["model"],
        "prompt": spec["prompt"],
        "max_tokens": spec["max_tokens"],
        "temperature": 0.0,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream": stream,
    }


def stream(
    base: str, body: Mapping[str, Any], on_first: Callable[[], None] = lambda: None, timeout: float = 120.0
) -> Dict[str, Any]:
    """POST a streaming request; {"status", "chunks": [data...], "done": bool (``[DONE]`` seen), "error", "seconds"}.

    ``on_first`` runs once the first data chunk is in. Never raises: how the stream ended is the result."""
    req = urllib.request.Request(
        base + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    started = time.monotonic()
    out: Dict[str, Any] = {"status": None, "chunks": [], "done": False, "error": None}
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            out["status"] = resp.status
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    out["done"] = True
                    break
                out["chunks"].append(data)
                if len(out["chunks"]) == 1:
                    on_first()
    except urllib.error.HTTPError as exc:
        out["status"] = exc.code
        out["error"] = exc.read().decode("utf-8", "replace")[:500]
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["seconds"] = round(time.monotonic() - started, 3)
    return out


def probe(base: str, spec: Mapping[str, Any]) -> Dict[str, Any]:
    """Every route a user calls, in order: metrics (the counts before), models, a greedy completion, the same
    streamed, a chat, version, metrics again (the counts after). The raw answers, keyed by route."""
    out: Dict[str, Any] = {"metrics_before": call(base, "/metrics")}
    out["models"] = call(base, "/v1/models")
    out["completion"] = call(base, "/v1/completions", completion_body(spec, False))
    out["stream"] = stream(base, completion_body(spec, True))
    chat = {
        "model": spec["model"],
        "messages": [{"role": "user", "content": spec["prompt"]}],
        "max_tokens": spec["max_tokens"],
        "temperature": 0.0,
    }
    out["chat"] = call(base, "/v1/chat/completions", chat)
    out["version"] = call(base, "/version")
    out["metrics"] = call(base, "/metrics")
    return out


def main() -> None:
    command, base = sys.argv[1], sys.argv[2]
    spec = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    if command == "health":
        data = health(base)
    elif command == "probe":
        data = probe(base, spec)
    else:
        first_file = spec.pop("_first_file", None)

        def first() -> None:
            print(FIRST_MARK, flush=True)
            if first_file:
                open(first_file, "w").close()

        data = stream(base, spec, on_first=first, timeout=300.0)
    print(PROBE_MARK + json.dumps(data), flush=True)


if __name__ == "__main__":
    main()
