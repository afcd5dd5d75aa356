"""What every family of checks shares: declarations, results and their marker lines, child Pythons, error lines.

Standard library only, Python >= 3.9: this runs inside images this project did not build (as a zipapp written
to the tool's tmpfs), and on the host, where ``matrixtool.model.checks`` reads the declarations (``CATALOGUE``).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.metadata as metadata
import importlib.util
import json
import os
import pkgutil
import re
import subprocess
import sys
from typing import Callable

# sys.modules["triton"] when this package was imported, before any check ran: a module planted by a .pth file or
# sitecustomize at start-up is there already (no-fake-triton tells it from one that `import vllm` plants).
TRITON_AT_START = sys.modules.get("triton")
# sys.path when this package was imported: what a check imports may add to it (`import setuptools`, which Triton
# 2.x does, appends setuptools/_vendor, whose typing_extensions 4.12.2 metadata would then shadow the real one).
SYS_PATH_AT_START = list(sys.path)
RESULT_MARK = "MATRIX-RESULT "
BEGIN_MARK = "MATRIX-BEGIN "
WORK_DIR = os.environ.get("MATRIX_SMOKE_DIR", "/tmp/matrix-smoke")
# The tiny model's folder: MATRIX_MODEL_DIR where the host mounts a volume for it (the serve check mounts the same
# volume into the server), else in the work dir.
MODEL_DIR = os.environ.get("MATRIX_MODEL_DIR") or os.path.join(WORK_DIR, "tiny-llama")
# The group of a check that runs on the host, not in the image (``serve``: its own containers): the in-image
# runner never calls its function; the host leaves it out of the execs and runs it itself.
HOST_GROUP = "host"
PACKAGE = __name__.rpartition(".")[0]
# Run conditions (matrixtool.model.conditions.Condition values) a profile may set.
CONDITIONS = (
    "user",
    "read_only",
    "tmpfs",
    "memory",
    "cpus",
    "network",
    "shm_size",
    "cap_drop",
    "no_new_privileges",
    "seccomp",
    "pids_limit",
    "env",
)


class Suite(str, enum.Enum):
    """A suite of checks (``--suite``): ``quick`` leaves out the slow ones (compiled generate), ``full`` runs all.

    ``str()`` and f-strings give the value, the form ``params["suite"]``, the reports and the flag use."""

    QUICK = "quick"
    FULL = "full"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


SUITES = tuple(s.value for s in Suite)


class Accelerator(str, enum.Enum):
    """The device family a variant targets (matrix.yaml ``accelerator``); a check applies to some of them."""

    CPU = "cpu"
    CUDA = "cuda"
    ROCM = "rocm"


ACCELERATORS = tuple(a.value for a in Accelerator)


@dataclasses.dataclass(frozen=True)
class Declaration:
    """One check's facts, declared next to its code with ``@check(name, **facts)``; the host reads it as it is
    (``matrixtool.model.checks.CHECKS``).

    ``proves``: what a pass shows; ``classes``: failure-class numbers (FAILURE-CLASSES.md); ``reports``: URLs;
    ``hint``: the fix when the check names none of its own; ``timeout``: seconds (a variant scales or overrides
    it: matrix.yaml ``smoke``); ``accelerators``: the variants it applies to by default (``ACCELERATORS``);
    ``affected_by``: run conditions (``CONDITIONS``) that can change its verdict beyond what run-conditions
    proves; ``suites``: the suites that run it; ``needs``: checks that must pass first (else this one reports
    ``skipped: <need> failed``); ``uses``: checks whose verdict it refers to (run with it, not gating);
    ``group``: checks of one group share an interpreter (one ``import vllm``), default the check's own name;
    ``fresh``: it needs an interpreter of its own (a clean sys.modules, other environment variables): ``group``
    is then None. Raises ValueError for an unknown accelerator, condition or suite.
    """

    name: str
    proves: str
    classes: tuple[int, ...]
    reports: tuple[str, ...]
    hint: str
    timeout: int
    accelerators: tuple[Accelerator, ...] = tuple(Accelerator)
    affected_by: tuple[str, ...] = ("env",)
    suites: tuple[Suite, ...] = (Suite.QUICK, Suite.FULL)
    needs: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    group: str | None = None
    fresh: bool = False
    function: Callable[[dict], dict] | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        unknown = [a for a in self.accelerators if a not in ACCELERATORS]
        unknown += [c for c in self.affected_by if c not in CONDITIONS] + [s for s in self.suites if s not in SUITES]
        if unknown or not self.accelerators:
            raise ValueError(f"check {self.name!r}: unknown accelerator, condition or suite {unknown}")
        fixed = {key: tuple(getattr(self, key)) for key in ("classes", "reports", "affected_by")}
        fixed.update(accelerators=tuple(Accelerator(a) for a in self.accelerators))
        fixed.update(needs=tuple(self.needs), uses=tuple(self.uses), timeout=int(self.timeout))
        fixed.update(suites=tuple(Suite(s) for s in self.suites), group=None if self.fresh else self.group or self.name)
        for key, value in fixed.items():
            object.__setattr__(self, key, value)

    def as_dict(self) -> dict:
        """The declaration as JSON-able data (no function)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "function"}


CATALOGUE = {}  # name -> Declaration, in the order the family modules declare them (see catalogue.py)


def check(name, **facts):
    """Decorator declaring the check ``name`` with ``facts`` (the fields of ``Declaration``); the function takes
    the params dict and returns ``result(...)``. Raises ValueError for a duplicate name (``Declaration`` for
    unknown facts), TypeError for a fact ``Declaration`` has no field for."""
    if name in CATALOGUE:
        raise ValueError(f"check {name!r}: declared twice")

    def register(function):
        CATALOGUE[name] = Declaration(name=name, function=function, **facts)
        return function

    return register


def result(status, diagnosis="", hint=None, **facts):
    """A check's outcome: status passed / failed / skipped, a diagnosis, a hint (None: the declared one), facts."""
    return {"status": status, "diagnosis": diagnosis, "hint": hint, "facts": facts}


def result_line(name, outcome):
    """The marker line the host parses for check ``name`` (``parse_results`` reads it back)."""
    return RESULT_MARK + json.dumps(dict(outcome, check=name), default=str)


def parse_results(output: str) -> dict:  # annotated: the host calls it from typed code
    """{check name: result dict} from the ``MATRIX-RESULT`` lines of ``output``, the last line per check winning;
    a line without a check name (older scripts) is keyed None. Raises ValueError (json) for an unreadable line."""
    found = {}
    for line in output.splitlines():
        if line.startswith(RESULT_MARK):
            parsed = json.loads(line[len(RESULT_MARK) :])
            if not isinstance(parsed, dict):
                raise ValueError(f"a result is no object: {line[:200]}")
            found[parsed.get("check")] = parsed
    return found


def split_logs(output: str) -> dict:
    """{check name: its part of ``output``}: from its ``MATRIX-BEGIN`` line to its result line."""
    parts, current = {}, None
    for line in output.splitlines(keepends=True):
        if line.startswith(BEGIN_MARK):
            current = line[len(BEGIN_MARK) :].strip()
        if current is not None:
            parts[current] = parts.get(current, "") + line
        if line.startswith(RESULT_MARK):
            current = None
    return parts


def last_error_line(text):
    """The last ``...Error``/``Exception``/``Exit`` line of ``text`` (a traceback), else its last line."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Exit)\b", line):
            return line.strip()
    return lines[-1].strip() if lines else ""


_CHAINED = re.compile(
    r"^(?:The above exception was the direct cause of the following exception:|"
    r"During handling of the above exception, another exception occurred:)$",
    re.MULTILINE,
)


def first_cause(text):
    """The error line of the first exception of a chained traceback (the one the others were raised from, e.g.
    ``No module named 'triton.backends'`` under transformers' ``Could not import module 'LlamaConfig'``), or
    None when ``text`` holds one exception only."""
    parts = _CHAINED.split(text or "")
    return last_error_line(parts[0]) if len(parts) > 1 else None


def error_with_cause(text):
    """``last_error_line(text)``, followed by ``(caused by <first_cause>)`` when a chained traceback started
    with another error."""
    error, cause = last_error_line(text), first_cause(text)
    return f"{error} (caused by {cause})" if cause and cause != error else error


# Import names whose distribution has another name (the fix installs the distribution).
_DISTRIBUTION_OF = {
    "yaml": "pyyaml",
    "PIL": "pillow",
    "cv2": "opencv-python-headless",
    "google": "protobuf",
    "flashinfer": "flashinfer-python",
    "deep_gemm": "deep-gemm",
}
# Optional GPU-kernel packages vLLM imports only on a path that uses them: {import name: (distribution, the vLLM
# setting that keeps vLLM off it)}. vLLM's V2 sampler imports flashinfer unless VLLM_USE_FLASHINFER_SAMPLER=0
# (vllm/envs.py); DeepGEMM's kernels are used unless VLLM_USE_DEEP_GEMM=0.
GPU_KERNEL_MODULES = {
    "flashinfer": ("flashinfer-python", "VLLM_USE_FLASHINFER_SAMPLER=0"),
    "deep_gemm": ("deep-gemm", "VLLM_USE_DEEP_GEMM=0"),
}
# Distributions of GPU kernels (and the toolkits they ship in) a GPU build of vLLM requires but loads only where
# used: pip-check reports their absence as that (canonical names; ``nvidia-`` prefixed ones too).
GPU_KERNEL_DISTRIBUTIONS = frozenset(
    {
        "flashinfer-python",
        "flashinfer-cubin",
        "flashinfer-jit-cache",
        "deep-gemm",
        "deep-ep",
        "xformers",
        "flash-attn",
        "cupy-cuda12x",
        "cupy-cuda13x",
        "quack-kernels",
        "tilelang",
        "triton-kernels",
        "cuda-python",
        "cuda-bindings",
        "nixl",
        "amdsmi",
        "aiter",
    }
)


def gpu_kernel_distribution(name):
    """True for a distribution of GPU kernels or the NVIDIA/CUDA runtime parts they load (``name`` canonical:
    lower case, ``-`` for ``_`` and ``.``)."""
    return name in GPU_KERNEL_DISTRIBUTIONS or name.startswith(("nvidia-", "cuda-"))


def import_hint(error):
    """A fix hint for an ImportError line that names its module (``No module named 'transformers'``), or None.

    The hint names the distribution to install; for ``cannot import name X from Y`` it names Y's version skew.
    """
    m = re.search(r"No module named '([^']+)'", error or "")
    top = m.group(1).split(".")[0] if m else None
    if m and top != m.group(1) and _regular_package(top):
        # The package is there but lacks a module its importer expects: a version skew, not a missing package.
        dists = providers_of(top) or [top]
        shown = ", ".join(f"{d} {dist_version(d) or ''}".strip() for d in dists)
        dist = _DISTRIBUTION_OF.get(top, top)
        see = "triton-import" if top == "triton" else "pip-check"
        return (
            f"{shown} has no module {m.group(1)}: not the version the importing package expects; install {dist} "
            f"at the version it requires (see {see}), or uninstall it"
        )
    if m and top in GPU_KERNEL_MODULES:
        dist, setting = GPU_KERNEL_MODULES[top]
        return (
            f"{dist}, an optional GPU-kernel package of vLLM, is not installed and this path imports it: "
            f"pip install {dist} (the build for this torch and CUDA), or set {setting} so vLLM does not use it"
        )
    if m:
        module = top
        dist = _DISTRIBUTION_OF.get(module, module)
        return f"install {dist} (the package that failed: `import {module}` finds no module), e.g. pip install {dist}"
    m = re.search(r"cannot import name '([^']+)' from '([^'.]+)", error or "")
    if m:
        return (
            f"{m.group(2)} {dist_version(m.group(2)) or ''} lacks {m.group(1)}: install the {m.group(2)} version "
            "the importing package requires (see pip-check)"
        )
    return None


def _regular_package(module):
    """True when ``module`` is found and is no namespace package (``google``, ``nvidia``: folders many
    distributions share, where a missing submodule is a missing distribution, e.g. protobuf for google.protobuf)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ValueError, ImportError):
        return False
    return spec is not None and spec.origin not in (None, "namespace")


def python_dev_package():
    """Debian's headers package for this Python, e.g. ``python3.11-dev``."""
    return f"python{sys.version_info[0]}.{sys.version_info[1]}-dev"


# What a C/C++ build of inductor (or of Triton's launcher) lacks, by the error text that shows it: the key names
# the cause (``compile_cause``), the same key in two checks' errors is one cause (matrixtool.smoke.rootcause).
_COMPILE_CAUSES = (
    ("python-headers", re.compile(r"Python\.h")),
    (
        "c++-compiler",
        re.compile(r"InvalidCxxCompiler|No working C\+\+ compiler|g\+\+: not found|'g\+\+'|\bc\+\+: not found"),
    ),
    ("c-compiler", re.compile(r"\bgcc: not found|'gcc'|No such file or directory: 'cc'|Failed to find C compiler")),
)


def compile_cause(error: str | None) -> str | None:  # annotated: the host calls it (rootcause)
    """``"python-headers"``, ``"c++-compiler"`` or ``"c-compiler"``: what a C/C++ build error in ``error`` text
    says is missing; None when it says none of these."""
    return next((key for key, pattern in _COMPILE_CAUSES if pattern.search(error or "")), None)


def compile_hint(error):
    """A fix hint for a C/C++ build error of inductor (or Triton's launcher) from ``error`` text, or None:
    a missing Python.h names ``python3.X-dev`` (X from this Python), a missing compiler names g++ or gcc."""
    cause = compile_cause(error)
    if cause == "python-headers":
        return (
            f"install the Python headers of this Python: apt-get install {python_dev_package()} (Python.h is missing)"
        )
    if cause == "c++-compiler":
        return "install a C++ compiler: apt-get install g++ (inductor's CPU backend compiles its kernels with it)"
    if cause == "c-compiler":
        return "install a C compiler: apt-get install gcc (Triton builds its launcher with it)"
    return None


_TOOLKIT_TAG = re.compile(r"^(cu|rocm)(\d+(?:\.\d+)*)$", re.IGNORECASE)
# The longest dotless ROCm label vLLM writes: its setup.py (get_vllm_version) labels a ROCm build
# "rocm" + the HIP version's digits without dots, cut to three (7.2.1 -> rocm721); its release pipeline names the
# index variant the same way (.buildkite/scripts/annotate-rocm-release.sh: rocm$(tr -d .)).
_DOTLESS_MAX = 3


def _dotless_digits(version):
    """The digits vLLM's dotless label of ``version`` (a tuple of ints) holds: all its digits, cut to three."""
    return "".join(str(n) for n in version)[:_DOTLESS_MAX]


def _covered(version, digits):
    """The leading parts of ``version`` whose digits ``digits`` (a prefix of them) states."""
    parts, used = [], 0
    for n in version:
        if used >= len(digits):
            break
        parts.append(n)
        used += len(str(n))
    return tuple(parts)


def _matching(digits, known):
    """The readings of dotless ROCm ``digits`` that versions of ``known`` (dotted ROCm versions, each a tuple of
    ints) state: each version whose dotless label is ``digits``, as far as those digits state it (``710`` beside
    7.10.1: (7, 10)), once each, in the order of ``known``."""
    return list(dict.fromkeys(_covered(v, digits) for v in known if _dotless_digits(v) == digits))


def _deciding(digits, known):
    """The one reading of dotless ROCm ``digits`` that ``known`` states (``_matching``), or None where it states none
    or more than one (the base image's 7.1.1 and torch's 7.11 both label as ``711``: they disagree, and neither is
    taken)."""
    found = _matching(digits, known)
    return found[0] if len(found) == 1 else None


def toolkit_tag_problem(tag: str, known: tuple[tuple[int, ...], ...] = ()) -> str | None:
    """Why the build tag ``tag`` names no one toolkit version, or None where it names one (or none at all:
    ``cpu``). A dotless ROCm label (vLLM's ``rocm721``, ``rocm72``) is the version's digits cut to three, so three
    of them read as more than one version (``rocm711``: 7.1.1 or 7.11; ``rocm100``: 1.0.0 or 10.0): such a label is
    ambiguous unless a version of ``known`` (the dotted ROCm versions stated for the same build: the base image's
    tag or /opt/rocm/.info/version, another pin's dotted label such as torch's ``+rocm7.11``) has exactly those
    digits, and no other version of ``known`` with those digits reads otherwise; then it is that version. One of
    more than three digits is no label vLLM writes, and one of two that starts with 1 is ROCm 10 as well as 1.0
    (which has no wheels): both ambiguous unless ``known`` decides; any other two-digit one (``rocm72``) is
    major.minor. (A part of two digits cut by the three, 7.2.10 as ``rocm721``, cannot be told from 7.2.1 at all.)
    A dotless CUDA tag (PyTorch's ``cu130``: the last digit the minor) of more than three digits is ambiguous
    (``cu1210``: 12.10 or 121.0). Dotted tags (PyTorch's ``rocm6.4``) are never ambiguous."""
    m = _TOOLKIT_TAG.match(tag or "")
    if not m or "." in m.group(2):
        return None
    kind, digits = m.group(1).lower(), m.group(2)
    if kind == "cu":
        if len(digits) <= 3:
            return None
        return (
            f"{tag!r} writes a CUDA version without dots, and {digits} reads as more than one "
            f"({int(digits[:-1])}.{digits[-1]} or {digits[:2]}.{int(digits[2:])}); PyTorch's labels have at most three "
            "digits, and this tool does not guess"
        )
    if _deciding(digits, known) is not None or not _ambiguous(digits):
        return None

    def shown(versions):
        return ", ".join(".".join(str(n) for n in v) for v in versions)

    readings = " or ".join(_readings(digits))
    matching = _matching(digits, known)
    if matching:
        beside = f", and the ROCm versions stated dotted for this build with those digits disagree ({shown(matching)})"
    elif known:
        beside = f", and none of the ROCm versions stated dotted for this build ({shown(known)}) has those digits"
    else:
        beside = ", and no ROCm version is stated dotted for this build (base image tag, torch's label)"
    return (
        f"{tag!r} writes a ROCm version without dots, as vLLM labels its ROCm builds (the version's digits, cut to "
        f"three), and {digits} reads as more than one ({readings}){beside}; this tool does not guess"
    )


def _ambiguous(digits):
    """Whether dotless ROCm ``digits`` read as more than one version on their own: three or more of them (three are
    X.Y.Z or X.YZ, and X.Y.Z may be X.Y.Z0-Z9 cut), or two starting with 1 (ROCm 1, which has no wheels, or 10)."""
    return len(digits) >= _DOTLESS_MAX or (len(digits) > 1 and digits[0] == "1")


def _readings(digits):
    """The versions ambiguous dotless ``digits`` can be: one digit per part, a two-digit major (where the first is
    1: ROCm 10 and later), a two-digit minor."""
    splits = [[*digits]]
    if digits[0] == "1":
        splits.append([digits[:2], *digits[2:]])
    if len(digits) > 2:
        splits.append([digits[0], digits[1:3], *digits[3:]])
    found = [".".join(parts) for parts in splits if all(p == "0" or not p.startswith("0") for p in parts)]
    return sorted(set(found), key=found.index)


def rocm_readings(tag: str) -> list[tuple[int, ...]]:
    """Every version a dotless ROCm label ``tag`` can be read as (``rocm711``: [(7, 1, 1), (7, 11)]), or [] for any
    other tag (dotted, CUDA, ``cpu``)."""
    m = _TOOLKIT_TAG.match(tag or "")
    if not m or m.group(1).lower() != "rocm" or "." in m.group(2):
        return []
    return [tuple(int(p) for p in r.split(".")) for r in _readings(m.group(2))]


def toolkit_of_tag(tag: str, known: tuple[tuple[int, ...], ...] = ()) -> tuple[Accelerator, tuple[int, ...]] | None:
    """``(accelerator, version)`` of a build tag: ``cu130`` is CUDA (13, 0) (the last digit the minor, as PyTorch
    names them), ``rocm6.4`` / ``rocm6.4.1`` ROCm dotted (PyTorch's labels), ``rocm72`` (7, 2) (vLLM's dotless
    label of two digits), or, for a dotless ROCm label of three, the parts of the first version of ``known`` (dotted
    ROCm versions stated for the same build) whose digits it holds (``rocm721`` beside 7.2.1 is (7, 2, 1);
    ``rocm710`` beside 7.10.1 is (7, 10)); None for any other tag (``cpu``, ``git1c57644``) and for one
    ``toolkit_tag_problem`` finds ambiguous (``rocm711`` beside no 7.1.1 or 7.11: never a guess)."""
    m = _TOOLKIT_TAG.match(tag or "")
    if not m or toolkit_tag_problem(tag, known) is not None:
        return None
    kind, digits = m.group(1).lower(), m.group(2)
    if kind == "cu":
        if "." in digits or len(digits) < 2:
            return None
        return Accelerator.CUDA, (int(digits[:-1]), int(digits[-1]))
    if "." in digits:
        return Accelerator.ROCM, tuple(int(part) for part in digits.split("."))
    decided = _deciding(digits, known)
    if decided is not None:
        return Accelerator.ROCM, decided
    return Accelerator.ROCM, tuple(int(part) for part in digits)


def dist_version(name):
    """The installed version of distribution ``name``, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def providers_of(module):
    """Distributions whose files provide top-level ``module`` (e.g. triton, pytorch-triton-rocm)."""
    if hasattr(metadata, "packages_distributions"):  # Python >= 3.10
        return sorted(set(metadata.packages_distributions().get(module, [])))
    found = set()
    for dist in metadata.distributions():
        for f in dist.files or []:
            if f.parts and (f.parts[0] == module or f.parts[0] == module + ".py"):
                found.add(dist.metadata["Name"])
                break
    return sorted(found)


def program_path(name):
    """The path of the program ``programs/<name>`` as a file: in the checkout itself (host mode), else extracted
    once from the zipapp into WORK_DIR/programs (the tool's tmpfs: nothing is written to the image's root)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", name)
    if os.path.isfile(here):
        return here
    target = os.path.join(WORK_DIR, "programs", name)
    if not os.path.isfile(target):
        data = pkgutil.get_data(PACKAGE, "programs/" + name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        partial = f"{target}.{os.getpid()}"
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, target)
    return target


def run_python(code, env_overrides=None, timeout=None):
    """Run ``python -c code`` in a child process; the CompletedProcess (text output)."""
    env = dict(os.environ)
    env.update(env_overrides or {})
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def run_program(name, args=(), env_overrides=None, timeout=None):
    """Run the program ``programs/<name>`` with ``args`` in a child Python; the CompletedProcess (text output)."""
    env = dict(os.environ)
    env.update(env_overrides or {})
    return subprocess.run(
        [sys.executable, program_path(name), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def marked(proc, mark):
    """The JSON object a program printed after ``mark`` (e.g. ``MATRIX-TORCH``), or None."""
    for line in proc.stdout.splitlines():
        if line.startswith(mark + " "):
            return json.loads(line[len(mark) + 1 :])
    return None


# torch's own words where it sees no GPU: the exception torch.cuda.init() raises (with a driver older than torch's
# CUDA: "The NVIDIA driver on your system is too old (found version 12020)"; with a libcuda of another driver than
# the kernel module: "Error 803: system has unsupported display driver / cuda driver combination").
_GPU_PROBE = (
    "import json, torch\n"
    "ok = torch.cuda.is_available()\n"
    "why = ''\n"
    "if not ok:\n"
    "    try:\n"
    "        torch.cuda.init()\n"
    "    except Exception as e:\n"
    "        why = ('%s: %s' % (type(e).__name__, e)).strip()\n"
    "print('MATRIX-GPU', ok, json.dumps(why))\n"
)


def gpu_probe():
    """(visible, error): whether torch sees a GPU (CUDA or ROCm: torch.cuda covers both), probed in a child
    process so a crashing ``import torch`` (seen under QEMU 7.2: SIGSEGV) cannot take this check down.
    ``visible`` is None, with ``error`` set, when torch does not import; False with ``error`` torch's reason
    (``torch.cuda.init()``'s exception, "" where it gave none)."""
    proc = run_python(_GPU_PROBE, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("MATRIX-GPU "):
            _, visible, why = line.split(" ", 2)
            return visible == "True", json.loads(why) if visible != "True" else None
    return None, last_error_line(proc.stderr) or f"exit {proc.returncode}"


def gpu_visible():
    """True when torch sees a GPU; False when it sees none or does not import (see gpu_probe)."""
    return bool(gpu_probe()[0])


def attached_gpu(accelerator, dev="/dev"):
    """The device node that shows a GPU of ``accelerator`` is attached here (``/dev/nvidiaN`` for cuda: a pod's
    device plugin or ``--gpus`` passes the GPU it allocated, whatever its number; ``/dev/kfd`` for rocm), or None."""
    try:
        names = sorted(os.listdir(dev))
    except OSError:
        return None
    if accelerator == "cuda":
        found = [n for n in names if n.startswith("nvidia") and n[len("nvidia") :].isdigit()]
        return os.path.join(dev, found[0]) if found else None
    return os.path.join(dev, "kfd") if accelerator == "rocm" and "kfd" in names else None


UNUSABLE_GPU_HINT = (
    "the process loads another libcuda.so.1 than the host driver's (see gpu-driver: a forward-compat folder on "
    "LD_LIBRARY_PATH or in /etc/ld.so.conf.d), or the host's driver is older than torch's CUDA (nvidia-smi "
    "names its version): use the host's driver libraries, or a driver that covers torch's CUDA"
)


def unusable_gpu(accelerator, probed=None):
    """A failure diagnosis where a GPU of ``accelerator`` is attached (a device node) but torch sees none: not
    "no GPU visible", which would skip the checks that use it. None otherwise. ``probed``: ``gpu_probe()``'s
    answer where the caller has one; else torch is probed here, only where a device node exists."""
    # cuda only: on ROCm the usual cause is access to /dev/dri and /dev/kfd (the render and video groups), which
    # this hint does not name; not yet seen on a ROCm machine.
    node = attached_gpu(accelerator) if accelerator == "cuda" else None
    if node is None:
        return None
    visible, why = probed if probed is not None else gpu_probe()
    if visible is not False:
        return None
    return f"a GPU is attached ({node}) but torch cannot use it: {why or 'torch.cuda.is_available() is False'}"


def needs_vllm(function):
    """Decorator: in host mode (params["host"]) a missing vLLM skips the check instead of failing it.

    Bare-metal GPU runners may check torch/triton before vLLM is installed (issue: GPU proof in host mode).
    """

    def wrapped(params):
        if params.get("host") and importlib.util.find_spec("vllm") is None:
            return result("skipped", "vLLM is not installed in this Python environment (host mode)")
        return function(params)

    return wrapped


def needs_gpu(function):
    """Decorator: on a GPU variant (params["accelerator"] is not "cpu") with no GPU visible, the check
    reports ``skipped: no GPU visible``: never a silent pass. A GPU attached that torch cannot use
    (``unusable_gpu``) and a torch that does not import are failures. On CPU variants the check always runs."""

    def wrapped(params):
        accelerator = params.get("accelerator", "cpu")
        if accelerator == "cpu":
            return function(params)
        visible, error = gpu_probe()
        if visible is None:
            return result("failed", f"`import torch` fails, so no GPU can be looked for: {error}", None)
        unusable = unusable_gpu(accelerator, (visible, error))
        if unusable:
            return result("failed", unusable, UNUSABLE_GPU_HINT)
        if not visible:
            return result(
                "skipped",
                f"no GPU visible (a {accelerator} variant: run on a host with a GPU, which then gets `--gpus all`)",
            )
        return function(params)

    return wrapped
