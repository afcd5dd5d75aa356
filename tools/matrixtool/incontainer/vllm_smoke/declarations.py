"""What a check is: its declaration (``Declaration``, made by ``@check``), the suites, accelerators and run
conditions a declaration names, and the catalogue they register in.

Standard library only, Python >= 3.9: this runs inside images this project did not build (as a zipapp written
to the tool's tmpfs), and on the host, where ``matrixtool.model.checks`` reads the declarations (``CATALOGUE``).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Callable, Dict, List

# A check's parameters (the host's ``check_params``: pins, the variant's promises, ``accelerator``, ``suite``) and
# its outcome (``results.result``: status, diagnosis, hint, facts).
Params = Dict[str, Any]
Outcome = Dict[str, Any]
CheckFunction = Callable[[Params], Outcome]

# The group of a check that runs on the host, not in the image (``serve``: its own containers): the in-image
# runner never calls its function; the host leaves it out of the execs and runs it itself.
HOST_GROUP = "host"


class Condition(str, enum.Enum):
    """One run condition a profile may set (its ``matrix.yaml`` key); checks declare which can change their verdict.
    The host's table of conditions (``matrixtool.model.conditions.ROWS``) has one row per member."""

    USER = "user"
    READ_ONLY = "read_only"
    TMPFS = "tmpfs"
    MEMORY = "memory"
    CPUS = "cpus"
    NETWORK = "network"
    SHM_SIZE = "shm_size"
    CAP_DROP = "cap_drop"
    NO_NEW_PRIVILEGES = "no_new_privileges"
    SECCOMP = "seccomp"
    PIDS_LIMIT = "pids_limit"
    NOFILE = "nofile"
    ENV = "env"


# The conditions' keys, as checks declare them in ``affected_by``.
CONDITIONS = tuple(c.value for c in Condition)


# vLLM's repository, whose issues and pull requests the declarations cite.
VLLM_REPO = "https://github.com/vllm-project/vllm"


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
    function: CheckFunction | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        unknown: List[str] = [str(a) for a in self.accelerators if a not in ACCELERATORS]
        unknown += [c for c in self.affected_by if c not in CONDITIONS]
        unknown += [str(s) for s in self.suites if s not in SUITES]
        if unknown or not self.accelerators:
            raise ValueError(f"check {self.name!r}: unknown accelerator, condition or suite {unknown}")
        fixed: Dict[str, Any] = {key: tuple(getattr(self, key)) for key in ("classes", "reports", "affected_by")}
        fixed.update(accelerators=tuple(Accelerator(a) for a in self.accelerators))
        fixed.update(needs=tuple(self.needs), uses=tuple(self.uses), timeout=int(self.timeout))
        fixed.update(suites=tuple(Suite(s) for s in self.suites), group=None if self.fresh else self.group or self.name)
        for key, value in fixed.items():
            object.__setattr__(self, key, value)

    def as_dict(self) -> Dict[str, Any]:
        """The declaration as JSON-able data (no function)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "function"}


# name -> Declaration, in the order the family modules declare them (see catalogue.py)
CATALOGUE: Dict[str, Declaration] = {}


def check(name: str, **facts: Any) -> Callable[[CheckFunction], CheckFunction]:
    """Decorator declaring the check ``name`` with ``facts`` (the fields of ``Declaration``); the function takes
    the params dict and returns ``result(...)``. Raises ValueError for a duplicate name (``Declaration`` for
    unknown facts), TypeError for a fact ``Declaration`` has no field for."""
    if name in CATALOGUE:
        raise ValueError(f"check {name!r}: declared twice")

    def register(function: CheckFunction) -> CheckFunction:
        CATALOGUE[name] = Declaration(name=name, function=function, **facts)
        return function

    return register
