"""How the variables a server is given are judged (failure classes 38-40), as pure functions of the environment and
the installed vLLM's registry (``programs/vllm_envs.py``): names vLLM does not know, values it or its libraries
refuse or misread, device lists, settings that need an absent package, proxies without a loopback bypass.

A finding is ``(severity, variable, diagnosis, fix)`` with severity ``ERROR`` (the setting fails the server or
silently does not do what it says) or ``WARNING`` (it works, with a cost the diagnosis names): docs/checks.md
"environment". Standard library only, Python >= 3.9; the host's ``deploy.kube`` reads the limits' figures here.
"""

from __future__ import annotations

import difflib
import re
import urllib.request
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

ERROR = "error"
WARNING = "warning"
# (severity, variable, diagnosis, fix)
Finding = Tuple[str, str, str, str]

# vLLM's own fallback where envs.py gives none it could read (vllm/envs.py, 0.32: "600").
ENGINE_READY_TIMEOUT = "VLLM_ENGINE_READY_TIMEOUT_S"
ENGINE_READY_DEFAULT_S = 600
# Start-up timeouts of the installed registry: its names that time a start (an engine's, a worker's, a core's).
STARTUP_TIMEOUT = re.compile(r"VLLM_\w*(READY|STARTUP|INIT)\w*TIMEOUT\w*")

# Variables vLLM removed for a command-line option: the option names the fix where no current name is near.
MOVED_TO_OPTIONS = {
    # vllm#50292: ignored since the attention backend became an engine argument (AttentionConfig.backend).
    "VLLM_ATTENTION_BACKEND": "--attention-backend",
}
# Words that mean "on" to a reader of the value; a getter that accepts fewer reads the rest as off.
TRUE_WORDS = ("1", "true", "yes", "on", "y", "t", "enable", "enabled")
FALSE_WORDS = ("", "0", "false", "no", "off", "n", "f", "disable", "disabled")
# Settings that a library honours only with an optional package: variable -> (package module, what needs it).
NEEDS_PACKAGE = {
    "HF_HUB_ENABLE_HF_TRANSFER": ("hf_transfer", "huggingface_hub's downloads"),
    "VLLM_USE_MODELSCOPE": ("modelscope", "vLLM's model downloads from ModelScope"),
}
PROXIES = ("http_proxy", "all_proxy", "https_proxy")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
NO_PROXY_FIX = "localhost,127.0.0.1,::1"


def nearest(name: str, names: Sequence[str]) -> Optional[str]:
    """The registry's name closest to ``name`` (difflib ratio at least 0.6), or None."""
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_names(env: Mapping[str, str], registry: Sequence[str], elsewhere: Mapping[str, str]) -> List[Finding]:
    """Class 38: each ``VLLM_*`` variable of ``env`` that the installed registry does not declare and that no
    file of the installed vllm package names (``elsewhere``: name -> the file that reads it), with the nearest
    current name."""
    known = set(registry)
    found: List[Finding] = []
    for name in sorted(env):
        if not name.startswith("VLLM_") or name in known or name in elsewhere:
            continue
        moved = MOVED_TO_OPTIONS.get(name)
        close = nearest(name, registry)
        instead = f"vLLM takes it as {moved}" if moved else f"the nearest current name is {close}" if close else ""
        found.append(
            (
                ERROR,
                name,
                f"{name}={env[name]} is not a variable of the installed vLLM (not in "
                "vllm/envs.py, read by none of its files): vLLM ignores it" + (f"; {instead}" if instead else ""),
                f"remove {name}" + (f", or use {moved}" if moved else f", or set {close}" if close else ""),
            )
        )
    return found


def flag_value(name: str, value: str, flag: Mapping[str, Any]) -> Optional[Finding]:
    """Class 39: a value a string-comparing getter (``flags`` of the registry) reads as off although it means on
    (an error), or reads as off being neither on nor off (a warning); None where it reads as meant."""
    seen = value.strip() if flag.get("strip") else value
    seen = seen.lower() if flag.get("lower") else seen
    accepted = [str(a) for a in flag.get("accepted", ())]
    if seen in accepted or value.strip().lower() in FALSE_WORDS:
        return None
    meant_on = value.strip().lower() in TRUE_WORDS
    return (
        ERROR if meant_on else WARNING,
        name,
        f"{name}={value!r} reads as false: vLLM's getter accepts only {', '.join(map(repr, accepted))} as true"
        + (", so the setting is off" if meant_on else ""),
        f"write {name}={accepted[0]}" if accepted else f"see vllm/envs.py for {name}",
    )


def rejected_values(
    env: Mapping[str, str], rejected: Mapping[str, str], flags: Mapping[str, Mapping[str, Any]]
) -> List[Finding]:
    """Class 39: values vLLM's own getters raise on (``rejected``: name -> error) and flag values read as off."""
    found: List[Finding] = [
        (ERROR, name, f"{name}={env.get(name)!r}: vLLM refuses it when read ({error})", f"fix {name}'s value")
        for name, error in sorted(rejected.items())
    ]
    for name, flag in sorted(flags.items()):
        if name in env and name not in rejected:
            made = flag_value(name, env[name], flag)
            if made is not None:
                found.append(made)
    return found


def device_lists(env: Mapping[str, str], accelerator: str) -> List[Finding]:
    """Class 39: device lists vLLM cannot use on a GPU variant: ``CUDA_VISIBLE_DEVICES`` entries that are not
    indexes (MIG-/GPU- UUIDs: vLLM maps devices with int(), ``ValueError: invalid literal for int()``,
    vllm#41848); on ROCm ``ROCR_VISIBLE_DEVICES`` (vLLM's start refuses it, "Please use HIP_VISIBLE_DEVICES
    instead", and HIP counts within ROCR's list: laifs-container-recipes#6) and a ``HIP_VISIBLE_DEVICES`` that
    differs from ``CUDA_VISIBLE_DEVICES`` (vllm/platforms/rocm.py raises "Inconsistent GPU visibility env vars")."""
    if accelerator == "cpu":
        return []
    found: List[Finding] = []
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        entries = [e.strip() for e in env.get(name, "").split(",") if e.strip()]
        named = [e for e in entries if not re.fullmatch(r"[0-9]+", e)]
        if named:
            found.append(
                (
                    ERROR,
                    name,
                    f"{name}={env[name]} names devices by {'MIG ' if any(e.startswith('MIG-') for e in named) else ''}"
                    f"UUID ({named[0]}): vLLM maps devices with int() and fails with 'ValueError: invalid literal "
                    "for int()' (vllm#41848)",
                    f"give {name} device indexes (0,1), or leave it unset and let the device plugin pass only the "
                    "assigned devices (NVIDIA_VISIBLE_DEVICES takes UUIDs)",
                )
            )
    if accelerator == "rocm":
        if env.get("ROCR_VISIBLE_DEVICES"):
            hip = env.get("HIP_VISIBLE_DEVICES")
            beside = f" beside HIP_VISIBLE_DEVICES={hip}" if hip else ""
            found.append(
                (
                    ERROR,
                    "ROCR_VISIBLE_DEVICES",
                    f"ROCR_VISIBLE_DEVICES={env['ROCR_VISIBLE_DEVICES']}{beside} (as Slurm and ROCm device plugins "
                    "set it): vLLM's start fails with 'RuntimeError: Please use HIP_VISIBLE_DEVICES instead of "
                    "ROCR_VISIBLE_DEVICES', and HIP counts its indexes within ROCR's list "
                    "(lumi-ai-factory/laifs-container-recipes#6)",
                    "give the list as HIP_VISIBLE_DEVICES and unset ROCR_VISIBLE_DEVICES (an entrypoint that copies "
                    "it, as laifs-container-recipes#6 does)",
                )
            )
        hip, cuda = env.get("HIP_VISIBLE_DEVICES") or None, env.get("CUDA_VISIBLE_DEVICES") or None
        if hip and cuda and hip != cuda:
            found.append(
                (
                    ERROR,
                    "HIP_VISIBLE_DEVICES",
                    f"HIP_VISIBLE_DEVICES={hip} and CUDA_VISIBLE_DEVICES={cuda} differ: vLLM's ROCm platform "
                    "raises 'Inconsistent GPU visibility env vars' at import",
                    "set only HIP_VISIBLE_DEVICES (vLLM copies it to CUDA_VISIBLE_DEVICES), or the same list in both",
                )
            )
    return found


def missing_packages(
    env: Mapping[str, str], installed: Mapping[str, bool], hub_uses_hf_transfer: bool
) -> List[Finding]:
    """Class 39: a setting whose package is absent (``installed``: module -> present). huggingface_hub >= 1.0
    no longer uses hf_transfer (``hub_uses_hf_transfer`` False, from its source): its switch then does nothing."""
    found: List[Finding] = []
    for name, (module, who) in sorted(NEEDS_PACKAGE.items()):
        if env.get(name, "").strip().lower() not in TRUE_WORDS:
            continue
        if name == "HF_HUB_ENABLE_HF_TRANSFER" and not hub_uses_hf_transfer:
            found.append(
                (
                    WARNING,
                    name,
                    f"{name}={env[name]}: the installed huggingface_hub no longer uses hf_transfer (it warns "
                    "'HF_HUB_ENABLE_HF_TRANSFER ... is deprecated') and downloads without it",
                    f"remove {name}; HF_XET_HIGH_PERFORMANCE=1 is its successor",
                )
            )
        elif not installed.get(module, False):
            found.append(
                (
                    ERROR,
                    name,
                    f"{name}={env[name]} needs the package {module}, which the image lacks: {who} fail at the "
                    "first download",
                    f"pip install {module.replace('_', '-')} in the image, or remove {name}",
                )
            )
    return found


def _first(env: Mapping[str, str], lower: str) -> str:
    """A proxy variable as urllib reads it: the lower-case name first, then the upper-case one."""
    return env[lower] if lower in env else env.get(lower.upper(), "")


def proxy_bypass(env: Mapping[str, str]) -> List[Finding]:
    """Class 40: a proxy without loopback in ``no_proxy``/``NO_PROXY`` (urllib's and requests' rule: the lower-case
    name first; ``urllib.request.proxy_bypass_environment``'s matching). ``http_proxy``/``all_proxy``: the image's
    own health check (urllib on http://127.0.0.1:8000) goes through the proxy and fails (rosclaw PR#221): an
    error; ``https_proxy`` only: loopback clients over TLS go through it: a warning."""
    no_proxy = _first(env, "no_proxy")
    bypass = getattr(urllib.request, "proxy_bypass_environment")  # noqa: B009 (not in typeshed)
    missing = [h for h in LOOPBACK_HOSTS if not bypass(h, {"no": no_proxy})]
    if not missing:
        return []
    found: List[Finding] = []
    for lower in PROXIES:
        value = _first(env, lower)
        if not value:
            continue
        name = lower if lower in env else lower.upper()
        http = lower != "https_proxy"
        found.append(
            (
                ERROR if http else WARNING,
                name,
                f"{name}={value} with no_proxy={no_proxy!r}, which leaves out {' and '.join(missing)}: "
                + (
                    "the image's own health check (http://127.0.0.1:8000/health) and every loopback client go "
                    "through the proxy and fail (rosclaw PR#221)"
                    if http
                    else "HTTPS clients of the server on loopback go through the proxy"
                ),
                f"set NO_PROXY and no_proxy to include {NO_PROXY_FIX} (docker run -e NO_PROXY=... -e no_proxy=...; "
                "Kubernetes: both in the container's env)",
            )
        )
        break  # one finding per environment: the fix is the same
    return found


def split_findings(findings: Sequence[Finding]) -> Dict[str, List[Finding]]:
    """{ERROR: [...], WARNING: [...]} in the order found."""
    return {sev: [f for f in findings if f[0] == sev] for sev in (ERROR, WARNING)}
