"""The measured times to ready that the probes of ``kube.manifests`` follow: the ``serve`` results of a ``tools/matrix
run/test --json-file`` report (``report_times``: the cold start, facts ``ready_s``, and the warm start on the compile
cache, facts ``warm.ready_s``), each checked to be a time to ready before it sizes a probe.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matrixtool.core import jsontext
from matrixtool.core.errors import ConfigError
from matrixtool.core.untrusted import check_shape
from matrixtool.model.yamlfile import read_config_text
from matrixtool.report import READ_BACK_SCHEMA

# The longest time to ready a report may give (a day): past it a number is no measurement of a start.
MAX_READY_S = 86400
MAX_REPORT_BYTES = 64 * 1024 * 1024


def _seconds(check: Mapping[str, Any], key: str, value: object) -> float:
    """``value`` (the ``key`` of ``check``'s facts) as a time to ready in seconds.

    Raises ValueError, naming the check, the key and the value: it is not a finite number of seconds in (0,
    ``MAX_READY_S``] (a string, JSON true, NaN, infinity, 1e308, a 400-digit integer)."""
    where = f"serve of {check['variant']}/{check['profile']}: {key}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):  # JSON true is no time
        raise ValueError(f"{where} {value!r} is not a number of seconds")
    seconds = float(value) if abs(value) <= MAX_READY_S else math.inf  # a 400-digit int overflows float()
    if not 0 < seconds <= MAX_READY_S:  # False for NaN too
        raise ValueError(f"{where} {value!r} is not a time to ready (seconds, above 0, at most {MAX_READY_S})")
    return seconds


def warm_times(report: Mapping[str, Any]) -> dict[tuple[str, str], float]:
    """Seconds to ready of the warm start per (variant, profile): facts ``warm.ready_s`` of the ``serve`` results of a
    report ``ready_times`` accepted. No ``warm``, a skipped one (no ``ready_s``) or one that never got ready
    (``ready_s`` null) gives no figure.

    Raises ValueError for a ``warm`` that is no object, or a ``warm.ready_s`` that is no time to ready (as
    ``ready_times``)."""
    times = {}
    for c in report["checks"]:
        facts = c.get("facts") or {}
        if c["check"] != "serve" or not isinstance(facts, Mapping) or facts.get("warm") is None:
            continue
        warm = facts["warm"]
        if not isinstance(warm, Mapping):
            raise ValueError(
                f"serve of {c['variant']}/{c['profile']}: warm {warm!r} is not an object (the warm start's facts)"
            )
        if warm.get("ready_s") is not None:
            times[(c["variant"], c["profile"])] = _seconds(c, "warm.ready_s", warm["ready_s"])
    return times


def ready_times(report: Mapping[str, Any]) -> dict[tuple[str, str], float]:
    """Seconds to ready per (variant, profile): the ``serve`` results (facts ``ready_s``, the cold start) of a
    ``--json`` report.

    Raises KeyError/TypeError/ValueError for a document that is no such report, ValueError for a ``ready_s``
    that is no time to ready (not a finite number of seconds in (0, ``MAX_READY_S``]: NaN, infinity, 1e308)."""
    times = {}
    for c in report["checks"]:
        facts = c.get("facts") or {}
        if c["check"] != "serve" or not isinstance(facts, Mapping) or facts.get("ready_s") is None:
            continue
        times[(c["variant"], c["profile"])] = _seconds(c, "ready_s", facts["ready_s"])
    return times


def report_times(report: Path | None) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """``ready_times`` (cold) and ``warm_times`` of the JSON report at ``report`` (None: no report, none).

    Raises:
        ConfigError: the report is unreadable, not a regular file (a FIFO is never waited on), over
            ``MAX_REPORT_BYTES``, not a ``run``/``test`` ``--json-file`` document (``READ_BACK_SCHEMA``), or a serve
            result's ``ready_s`` or ``warm`` is no time to ready (exit 3, naming the key and value).
    """
    if report is None:
        return {}, {}
    what = "a 'tools/matrix run/test --json-file' report"
    text = read_config_text(report, limit=MAX_REPORT_BYTES, what=what)
    try:
        doc = jsontext.loads(text)
        check_shape(doc, READ_BACK_SCHEMA, source=str(report), what=what)
        return ready_times(doc), warm_times(doc)
    except KeyError as exc:
        raise ConfigError(
            str(report), [f"not a 'tools/matrix run/test --json-file' report (a check lacks the key {exc})"]
        ) from exc
    except (OSError, ValueError, TypeError, AttributeError) as exc:  # AttributeError: "checks" holds no objects
        raise ConfigError(str(report), [f"not a 'tools/matrix run/test --json-file' report ({exc})"]) from exc
