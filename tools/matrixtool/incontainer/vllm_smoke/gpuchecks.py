"""GPU images without a GPU: how the image finds the host's driver (class 23).

What the files and settings of the image show: whether Triton can locate ``libcuda.so.1``, whether a
forward-compatibility ``libcuda`` shadows the host's driver, and whether the CUDA version the image declares to
the NVIDIA container runtime covers what its torch was built for.
"""

from __future__ import annotations

import glob
import os
import re

from .common import (
    WORK_DIR,
    Accelerator,
    check,
    dist_version,
    marked,
    result,
    rocm_readings,
    run_program,
    run_python,
    toolkit_of_tag,
)

_VLLM = "https://github.com/vllm-project/vllm"
# Where Triton's NVIDIA backend asks for libcuda (triton/backends/nvidia/driver.py, libcuda_dirs(): the
# environment variable first, else the output of `/sbin/ldconfig -p`, a fixed path).
LDCONFIG = "/sbin/ldconfig"
LIBCUDA_ENV = "TRITON_LIBCUDA_PATH"
# The folders of NVIDIA's forward-compatibility driver libraries (the cuda-compat package).
_COMPAT = re.compile(r"/cuda[^/]*/compat/?$|/compat/lib")


def ld_conf_dirs(root="/etc/ld.so.conf"):
    """The folders ld.so.conf names, in the order the dynamic loader's cache searches them (``include`` globs
    expanded in name order, as ldconfig does); files that cannot be read are left out."""
    found = []

    def read(path, depth):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("include ") and depth < 4:
                pattern = line.split(None, 1)[1]
                if not os.path.isabs(pattern):
                    pattern = os.path.join(os.path.dirname(path), pattern)
                for name in sorted(glob.glob(pattern)):
                    read(name, depth + 1)
            elif line.startswith("/"):
                found.append(line)

    read(root, 0)
    return found


def compat_shadows(ld_library_path, conf_dirs, exists=os.path.exists):
    """The forward-compat folder whose ``libcuda.so.1`` the loader takes first, as ``[(folder, where)]`` (``where``
    names the setting), else ``[]``. The loader's order: ``LD_LIBRARY_PATH``, then ld.so.conf's folders (ldconfig
    caches them in that order); the first folder holding a ``libcuda.so.1`` wins, so a compat folder behind the
    host driver's (``/usr/local/nvidia/lib64`` on LD_LIBRARY_PATH, seen on an H200 host) shadows nothing.
    Pure but for ``exists``."""
    for where, dirs in (
        ("LD_LIBRARY_PATH", [d for d in (ld_library_path or "").split(":") if d]),
        ("ld.so.conf", conf_dirs),
    ):
        for folder in dirs:
            if exists(os.path.join(folder, "libcuda.so.1")):
                return [(folder, where)] if _COMPAT.search(folder.rstrip("/") + "/") else []
    return []


def driver_of(folder, realpath=os.path.realpath):
    """The driver version a folder's ``libcuda.so.1`` belongs to (``libcuda.so.535.261.03`` -> ``535.261.03``),
    or None where its name carries none."""
    m = re.match(
        r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$", os.path.basename(realpath(os.path.join(folder, "libcuda.so.1")))
    )
    return m.group(1) if m else None


def declared_cuda(env):
    """The CUDA version (major, minor) the image declares to the NVIDIA container runtime: ``NVIDIA_REQUIRE_CUDA``
    (``cuda>=12.8 brand=…``), else ``CUDA_VERSION`` (nvidia/cuda base images); with the variable's name, or None."""
    m = re.search(r"cuda>=\s*(\d+)\.(\d+)", env.get("NVIDIA_REQUIRE_CUDA", ""))
    if m:
        return (int(m.group(1)), int(m.group(2))), "NVIDIA_REQUIRE_CUDA"
    m = re.match(r"(\d+)\.(\d+)", env.get("CUDA_VERSION", ""))
    if m:
        return (int(m.group(1)), int(m.group(2))), "CUDA_VERSION"
    return None


def driver_findings(*, ldconfig, libcuda_env, compat, declared, torch_cuda):
    """(problems, fixes) of driver discovery from what the image shows: ``ldconfig`` whether /sbin/ldconfig is an
    executable, ``libcuda_env`` TRITON_LIBCUDA_PATH, ``compat`` (``compat_shadows``), ``declared``
    (``declared_cuda``), ``torch_cuda`` torch.version.cuda (None: a torch without CUDA). Pure."""
    problems, fixes = [], []
    if not ldconfig and not libcuda_env:
        problems.append(
            f"{LDCONFIG} is missing and {LIBCUDA_ENV} is unset: Triton finds libcuda.so.1 only through "
            f"`{LDCONFIG} -p` (triton/backends/nvidia/driver.py, libcuda_dirs()), so the first Triton kernel fails "
            f"with FileNotFoundError: '{LDCONFIG}'"
        )
        fixes.append(
            f"keep {LDCONFIG} in the image (Debian/Ubuntu: libc-bin), or set {LIBCUDA_ENV} to the folder the "
            "container runtime mounts the driver into (e.g. /usr/lib/x86_64-linux-gnu)"
        )
    if compat:
        drivers = {folder: driver_of(folder) for folder, _ in compat}
        shown = ", ".join(
            f"{folder} ({where}{', driver ' + drivers[folder] if drivers[folder] else ''})" for folder, where in compat
        )
        problems.append(
            f"a forward-compatibility libcuda.so.1 is first on the loader's path: {shown}; every process loads it "
            "instead of the host driver's, and CUDA fails where the two differ: `Error 803: system has unsupported "
            "display driver / cuda driver combination`, or torch's `The NVIDIA driver on your system is too old` "
            "where that libcuda is older than torch's CUDA"
        )
        fixes.append(
            "take the compat folder out of LD_LIBRARY_PATH and /etc/ld.so.conf.d (the container runtime mounts the "
            "host's libcuda); add it per deployment only on hosts whose driver is older than the image's CUDA"
        )
    if declared and torch_cuda:
        m = re.match(r"(\d+)\.(\d+)", str(torch_cuda))
        needed = (int(m.group(1)), int(m.group(2))) if m else None
        (have, variable) = declared
        if needed and have < needed:
            problems.append(
                f"the image declares CUDA {have[0]}.{have[1]} ({variable}) but torch is built for CUDA {torch_cuda}: "
                "the container runtime admits drivers too old for torch, which then fails at start with `The "
                "NVIDIA driver on your system is too old`"
            )
            fixes.append(
                f"build on a base image of CUDA {torch_cuda} or newer, or set NVIDIA_REQUIRE_CUDA=cuda>={torch_cuda}"
            )
    return problems, fixes


@check(
    "gpu-driver",
    proves=(
        "without a GPU: Triton can find libcuda.so.1 (/sbin/ldconfig or TRITON_LIBCUDA_PATH), no forward-compat "
        "libcuda shadows the host's driver, and the CUDA the image declares covers its torch's"
    ),
    classes=(23,),
    reports=(
        "https://github.com/NixOS/nixpkgs/issues/426296",
        "https://github.com/huggingface/kernels/issues/670",
        f"{_VLLM}/issues/33447",
        "https://github.com/gpustack/gpustack/issues/4678",
    ),
    hint="keep /sbin/ldconfig (or set TRITON_LIBCUDA_PATH), keep cuda-compat off the loader's path, and declare "
    "the CUDA version torch is built for",
    timeout=120,
    accelerators=("cuda",),
    group="light",
)
def check_gpu_driver(params):
    env = dict(os.environ)
    ldconfig = os.access(LDCONFIG, os.X_OK)
    compat = compat_shadows(env.get("LD_LIBRARY_PATH"), ld_conf_dirs())
    declared = declared_cuda(env)
    torch_cuda = None
    if dist_version("torch") is not None:  # a child: this group does not import torch
        proc = run_python("import torch; print('MATRIX-CUDA', torch.version.cuda)", timeout=300)
        torch_cuda = next(
            (line.split()[1] for line in proc.stdout.splitlines() if line.startswith("MATRIX-CUDA ")), None
        )
        torch_cuda = None if torch_cuda in (None, "None") else torch_cuda
    facts = {
        "ldconfig": ldconfig,
        LIBCUDA_ENV: env.get(LIBCUDA_ENV),
        "compat": [list(c) for c in compat],
        "declared_cuda": ".".join(map(str, declared[0])) if declared else None,
        "declared_by": declared[1] if declared else None,
        "torch_cuda": torch_cuda,
    }
    problems, fixes = driver_findings(
        ldconfig=ldconfig, libcuda_env=env.get(LIBCUDA_ENV), compat=compat, declared=declared, torch_cuda=torch_cuda
    )
    if problems:
        return result("failed", "; ".join(problems), "; ".join(fixes), **facts)
    how = f"{LIBCUDA_ENV}={env[LIBCUDA_ENV]}" if env.get(LIBCUDA_ENV) else f"{LDCONFIG} -p"
    cuda = (
        f"; declares CUDA {facts['declared_cuda']} ({facts['declared_by']}), torch is built for {torch_cuda}"
        if declared and torch_cuda
        else ("; declares no CUDA version" if not declared else "; torch is no CUDA build")
    )
    return result("passed", f"Triton finds libcuda through {how}; no forward-compat libcuda on the path{cuda}", **facts)


# --- ROCm images (classes 28, 29) ------------------------------------------------------------------------------
_DT_NEEDED, _DT_STRTAB, _SHT_DYNAMIC = 1, 5, 6


def elf_needed(path):
    """The DT_NEEDED entries (sonames) of the ELF shared object ``path``, read from its ``.dynamic`` section and
    the string table it links to (64- and 32-bit, either byte order). Raises OSError for an unreadable file,
    ValueError for a file that is no ELF object or is cut short."""
    import struct

    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise ValueError(f"{path} is no ELF file")
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    try:
        if wide:
            (shoff,) = struct.unpack_from(order + "Q", data, 0x28)
            shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
        else:
            (shoff,) = struct.unpack_from(order + "I", data, 0x20)
            shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
        sections = []
        for i in range(shnum):
            base = shoff + i * shentsize
            if wide:
                _, stype, _, _, offset, size, link, _, _, entsize = struct.unpack_from(order + "IIQQQQIIQQ", data, base)
            else:
                _, stype, _, _, offset, size, link, _, _, entsize = struct.unpack_from(order + "IIIIIIIIII", data, base)
            sections.append((stype, offset, size, link, entsize))
        needed = []
        for stype, offset, size, link, entsize in sections:
            if stype != _SHT_DYNAMIC:
                continue
            _, str_off, str_size, _, _ = sections[link]
            fmt = order + ("qQ" if wide else "iI")
            step = entsize or struct.calcsize(fmt)
            for pos in range(offset, offset + size, step):
                tag, value = struct.unpack_from(fmt, data, pos)
                if tag == 0:
                    break
                if tag == _DT_NEEDED and value < str_size:
                    end = data.index(b"\0", str_off + value)
                    needed.append(data[str_off + value : end].decode("utf-8", "replace"))
        return needed
    except (struct.error, IndexError) as exc:
        raise ValueError(f"{path}: a cut-short ELF file ({exc})") from exc


_CUDA_LIBS = re.compile(r"^lib(cudart|cuda|cublas|cublasLt|cudnn|nccl|nvrtc)\.so")
_ROCM_LIBS = re.compile(r"^lib(amdhip64|rocblas|hipblas|rccl|MIOpen|hiprtc)\.so")


def foreign_links(needed_by, accelerator):
    """``{file: [sonames]}`` of extensions linked against another accelerator's runtime than ``accelerator``'s
    (a ROCm image: CUDA's libcudart, libcublas…; a CUDA image: ROCm's libamdhip64…), from ``needed_by``
    (``{file: DT_NEEDED list}``). Pure."""
    pattern = _CUDA_LIBS if accelerator == "rocm" else _ROCM_LIBS if accelerator == "cuda" else None
    if pattern is None:
        return {}
    found = {}
    for path, needed in needed_by.items():
        bad = [n for n in needed if pattern.match(n)]
        if bad:
            found[path] = bad
    return found


def _vllm_extensions():
    """The native extensions of the installed vLLM (``vllm/_C*.so``, ``vllm/_*_C*.so`` and the like at its top
    level), found without importing it; [] where no vLLM is installed."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return []
    found = []
    for folder in spec.submodule_search_locations:
        found += sorted(glob.glob(os.path.join(folder, "_*.so")))
    return found


# Where a ROCm image's installed ROCm says its version ("7.2.1-81"): the rocm-core package writes it.
ROCM_INFO = "/opt/rocm/.info/version"


def hip_of_version_py(text):
    """The ``hip`` value torch's ``version.py`` sets (``hip: Optional[str] = '7.2.53211-e4ba3ffb04'``), or None
    (``hip = None``: no ROCm build). Pure."""
    m = re.search(r"^hip\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return m.group(1) if m else None


def torch_hip_version():
    """``torch.version.hip`` read from the installed torch's ``version.py`` without importing torch; None where no
    torch is installed or it is no ROCm build."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(folder, "version.py"), encoding="utf-8", errors="replace") as f:
                return hip_of_version_py(f.read())
        except OSError:
            continue
    return None


def _major_minor(text):
    m = re.match(r"\s*(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _full_version(text):
    """The dotted version at the start of ``text`` as ints (``7.2.1-81``: (7, 2, 1)), or None."""
    m = re.match(r"\s*(\d+(?:\.\d+)+)", text or "")
    return tuple(int(n) for n in m.group(1).split(".")) if m else None


def rocm_toolkit_problems(vllm_version, torch_hip, image_rocm):
    """``(problems, fixes)`` where vLLM's ROCm build (the ``+rocm721`` label of ``vllm_version``, read beside the
    image's ROCm: ``common.toolkit_of_tag``), torch's HIP (``torch_hip``: ``torch.version.hip``, whose third number
    is a build, not a patch) and the image's ROCm (``image_rocm``: the text of /opt/rocm/.info/version) name another
    major.minor; vLLM is the reference, else torch. A part that names none is left out. A vLLM label that names more
    than one ROCm (``common.toolkit_tag_problem``: ``rocm711`` beside an image of neither 7.1.1 nor 7.11, or without
    a version file) is compared by all its readings: a mismatch is reported only where none of them agrees (never a
    guess). Pure."""
    label = (vllm_version or "").partition("+")[2]
    full = _full_version(image_rocm)
    tagged = toolkit_of_tag(label, (full,) if full else ())
    if tagged is not None:
        vllm = [tagged[1][:2]] if tagged[0] is Accelerator.ROCM else []
    else:
        vllm = list(dict.fromkeys(r[:2] for r in rocm_readings(label)))
    torch, image = _major_minor(torch_hip), _major_minor(image_rocm)

    def shown(versions):
        return " or ".join(".".join(str(n) for n in version) for version in versions)

    problems, fixes = [], []
    ref = ("vLLM " + vllm_version, vllm) if vllm else ("torch (HIP " + str(torch_hip) + ")", [torch]) if torch else None
    if ref is None:
        return problems, fixes
    read = f" (its label {label!r} reads as either)" if len(ref[1]) > 1 else ""
    if vllm and torch and torch not in vllm:
        problems.append(
            f"{ref[0]} is built for ROCm {shown(vllm)}{read}, but torch for ROCm {shown([torch])} (torch.version.hip "
            f"{torch_hip}): vLLM's extensions, compiled against another torch and ROCm, fail to load (undefined "
            "symbol) or misbehave"
        )
        fixes.append(
            "install the torch vLLM's ROCm wheel pins (its Requires-Dist), from vLLM's ROCm index first in the "
            "variant's index, not PyTorch's index of another ROCm"
        )
    if image and image not in ref[1]:
        problems.append(
            f"{ref[0]} is built for ROCm {shown(ref[1])}{read}, but the image's ROCm is {shown([image])} ({ROCM_INFO} "
            f"{image_rocm.strip()}): the ROCm libraries it links (libamdhip64, hipBLASLt, rocBLAS, RCCL) are another "
            "release's"
        )
        fixes.append(f"base the image on ROCm {shown(ref[1])} (matrix.yaml base_image)")
    return problems, fixes


@check(
    "rocm-build",
    proves=(
        "without a GPU: vLLM's extensions are a ROCm build (none links CUDA's libcudart/libcublas), its torch and "
        "the image's ROCm are the ROCm release vLLM's build names (major.minor), and amdsmi, which vLLM's platform "
        "detection needs to see an AMD GPU, imports"
    ),
    classes=(28, 29, 30),
    reports=(f"{_VLLM}/issues/44660", f"{_VLLM}/issues/24576"),
    hint="install vLLM's ROCm build (a ROCm wheel index, or AMD's rocm/vllm images), the torch it pins, and amdsmi",
    timeout=120,
    accelerators=("rocm",),
    group="light",
)
def check_rocm_build(params):
    import importlib.util

    needed_by, unreadable = {}, []
    for path in _vllm_extensions():
        try:
            needed_by[path] = elf_needed(path)
        except (OSError, ValueError) as exc:
            unreadable.append(f"{path}: {exc}")
    foreign = foreign_links(needed_by, "rocm")
    amdsmi = importlib.util.find_spec("amdsmi") is not None
    try:
        with open(ROCM_INFO, encoding="utf-8", errors="replace") as f:
            image_rocm = f.read(200)
    except OSError:
        image_rocm = None
    torch_hip = torch_hip_version()
    facts = {
        "vllm": dist_version("vllm"),
        "extensions": {os.path.basename(p): n for p, n in needed_by.items()},
        "foreign": {os.path.basename(p): n for p, n in foreign.items()},
        "unreadable": unreadable,
        "amdsmi": dist_version("amdsmi") or (True if amdsmi else None),
        "torch_hip": torch_hip,
        "image_rocm": image_rocm.strip() if image_rocm else None,
    }
    problems, fixes = [], []
    if foreign:
        shown = "; ".join(f"{p} needs {', '.join(n)}" for p, n in foreign.items())
        first = next(iter(foreign.values()))[0]
        problems.append(
            f"vLLM {facts['vllm']} is a CUDA build: {shown}. In a ROCm image its extensions fail to load "
            f"(`{first}: cannot open shared object file`) and vLLM has no kernels"
        )
        fixes.append(
            "install vLLM's ROCm build: the variant's vllm source must be a ROCm index (matrix.yaml "
            f"variants.{params.get('variant') or 'rocm'}.index), not PyPI's vllm, which is the CUDA build"
        )
    if not needed_by and dist_version("vllm") is not None:
        problems.append(f"vLLM {dist_version('vllm')} has no native extension (vllm/_*.so): no kernels for ROCm")
        fixes.append("install vLLM's ROCm build, which ships vllm/_C.abi3.so and vllm/_rocm_C.abi3.so")
    if not amdsmi:
        problems.append(
            "amdsmi is not installed: vLLM's platform detection (vllm/platforms/__init__.py, rocm_platform_plugin) "
            "imports amdsmi to find an AMD GPU, so vLLM stays on UnspecifiedPlatform and fails to infer the device"
        )
        fixes.append("pip install amdsmi at the image's ROCm version (or ROCm's amd-smi-lib, /opt/rocm/share/amd_smi)")
    if not foreign:
        versions, version_fixes = rocm_toolkit_problems(facts["vllm"], torch_hip, image_rocm)
        problems += versions
        fixes += version_fixes
    if problems:
        return result("failed", "; ".join(problems), "; ".join(fixes), **facts)
    names = ", ".join(os.path.basename(p) for p in needed_by)
    hip = f"; torch's HIP {torch_hip}" if torch_hip else ""
    return result(
        "passed",
        f"vLLM {facts['vllm']}'s extensions ({names}) link no CUDA runtime{hip}; amdsmi is installed",
        **facts,
    )


# --- GPU architecture coverage (class 24) ----------------------------------------------------------------------
_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_PTX, _FATBIN_ELF = 1, 2


def elf_section(path, name):
    """(offset, size) of the section ``name`` (``.nv_fatbin``) of the ELF file ``path`` (64-bit little-endian,
    as every Linux x86-64 and arm64 object), read from its section headers only; None where it has none or is no
    such ELF file. Raises OSError for an unreadable file."""
    import struct

    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return None
        shoff = struct.unpack_from("<Q", head, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        if len(table) < shentsize * shnum or shstrndx >= shnum:
            return None
        headers = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
        str_off, str_size = headers[shstrndx][4], headers[shstrndx][5]
        f.seek(str_off)
        names = f.read(str_size)
    wanted = name.encode()
    for h in headers:
        end = names.find(b"\0", h[0])
        if names[h[0] : end if end >= 0 else None] == wanted:
            return h[4], h[5]
    return None


def fatbin_archs(f, start=0, end=None):
    """``{"sass": [...], "ptx": [...]}``: the ``sm_XY`` of each cubin and PTX entry of the CUDA fat binaries
    between ``start`` and ``end`` of the open binary file ``f`` (an ELF object's ``.nv_fatbin`` section). Each fat
    binary: a 16-byte header (magic 0xBA55ED50, version, header size, payload size), then entries of a header
    (kind 1 PTX / 2 ELF, header size, payload size at 8, the arch at 28) and their payload, which is skipped
    (only headers are read: vLLM's _C is hundreds of MB). Pure but for reading ``f``."""
    import struct

    if end is None:
        f.seek(0, 2)
        end = f.tell()
    sass, ptx = set(), set()
    pos = start
    while pos + 16 <= end:
        f.seek(pos)
        header = f.read(16)
        magic, _, header_size, fat_size = struct.unpack("<IHHQ", header)
        if magic != _FATBIN_MAGIC:  # padding between fat binaries: look for the next one, 8-byte aligned
            pos += 8
            continue
        entry, stop = pos + header_size, min(end, pos + header_size + fat_size)
        while entry + 32 <= stop:
            f.seek(entry)
            kind, _, entry_header, payload = struct.unpack("<HHIQ", f.read(16))
            f.seek(entry + 28)
            arch = struct.unpack("<I", f.read(4))[0]
            if entry_header < 32 or kind not in (_FATBIN_PTX, _FATBIN_ELF):
                break
            (sass if kind == _FATBIN_ELF else ptx).add(arch)
            entry += entry_header + payload
        pos = max(stop, pos + 16)
    return {"sass": [f"sm_{a}" for a in sorted(sass)], "ptx": [f"sm_{a}" for a in sorted(ptx)]}


def _number(arch):
    """``sm_90a`` -> (90, "a"); ``compute_90`` -> (90, ""); None for another form."""
    m = re.match(r"^(?:sm|compute)_(\d+)([af]?)$", arch)
    return (int(m.group(1)), m.group(2)) if m else None


def covered(arch, sass, ptx):
    """True when a GPU of ``arch`` (``sm_90``) runs kernels of ``sass`` (cubins: the same major version, a minor
    not above ``arch``'s; an ``a`` cubin only on its own arch, an ``f`` one on its family) or ``ptx`` (PTX of a
    version not above ``arch``'s, JIT-compiled by the driver; arch-specific ``a`` PTX only on its own arch). Pure."""
    want = _number(arch)
    if want is None:
        return arch in sass or arch in ptx
    for have in sass:
        got = _number(have)
        if got is None:
            continue
        if got[1] == "a":  # sm_90a: that GPU only
            if got[0] == want[0]:
                return True
        elif got[1] == "f":  # sm_100f: that family, from that version on
            if got[0] // 10 == want[0] // 10 and got[0] <= want[0]:
                return True
        elif got[0] // 10 == want[0] // 10 and got[0] <= want[0]:
            return True
    for have in ptx:
        got = _number(have)
        if got is not None and got[0] <= want[0] and (got[1] != "a" or got[0] == want[0]):
            return True
    return False


def ptxas_targets(help_text):
    """The ``sm_*`` values ``ptxas --help`` lists as allowed for ``--gpu-name`` (``Allowed values for this option:
    'compute_50',…,'sm_90a'``), or [] where it lists none."""
    m = re.search(r"--gpu-name.*?Allowed values for this option:\s*(.*?)(?:\n\s*\n|\n--|\Z)", help_text or "", re.S)
    return sorted(set(re.findall(r"'(sm_\d+[af]?)'", m.group(1)))) if m else []


def aot_error_line(text):
    """The line of a Triton compile error that names the cause: ptxas's ``fatal`` line (``ptxas-blackwell fatal :
    Value 'sm_999a' is not defined for option 'gpu-name'``) where there is one, else the first non-empty line."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    for line in lines:
        if re.search(r"\bfatal\b", line):
            return re.sub(r"\s+:", " :", line)
    return lines[0] if lines else "no error text"


def aot_findings(report, wanted):
    """(problems, fixes, compiled) of the ahead-of-time compiles of programs/triton_aot.py (its ``MATRIX-AOT``
    object, or None when it printed none) for the archs ``wanted``: ``compiled`` is True when every arch was
    compiled, False when one failed, None when no compile answered or every compile failed before ptxas (an API
    this Triton has otherwise; the caller falls back on ``ptxas --help``).
    Pure."""
    if not report or report.get("lacking"):
        return [], [], None
    results = report.get("results") or {}
    failed = {a: aot_error_line(results[a]) for a in wanted if a in results and results[a] != "ok"}
    if not failed:
        return [], [], True if all(a in results for a in wanted) else None
    if "ok" not in results.values() and not any("ptxas" in results[a] for a in failed):
        # No arch compiled and ptxas was never reached: this Triton's API, not an arch, failed.
        return [], [], None
    version = report.get("triton")
    problems = [
        f"Triton {version} cannot compile a kernel for {arch} (`{line}`): every Triton kernel fails there"
        for arch, line in failed.items()
    ]
    fixes = [
        f"install a Triton (with it the torch that pins it) newer than {version} whose bundled ptxas targets "
        f"{', '.join(failed)}, or point TRITON_PTXAS_PATH at a CUDA toolkit's ptxas that does"
    ]
    return problems, fixes, False


def _triton_aot(wanted):
    """(MATRIX-AOT object, facts) of programs/triton_aot.py compiling for ``wanted`` in a child Python, its kernel
    cache under WORK_DIR (the tool's tmpfs); facts say per arch "ok", the error's line, or why none was compiled."""
    env = {"TRITON_CACHE_DIR": os.path.join(WORK_DIR, "triton-aot-cache")}
    try:
        proc = run_program("triton_aot.py", [a for a in wanted if a.startswith("sm_")], env, timeout=120)
    except Exception as e:  # subprocess.TimeoutExpired, OSError: no compile answered
        return None, f"not compiled ahead of time ({type(e).__name__}: {e})"
    report = marked(proc, "MATRIX-AOT")
    if report is None:
        from .common import last_error_line

        return None, f"not compiled ahead of time ({last_error_line(proc.stderr) or f'exit {proc.returncode}'})"
    if report.get("lacking"):
        return report, f"not compiled ahead of time (triton {report.get('triton')} lacks {report['lacking']})"
    if aot_findings(report, wanted)[2] is None and "ok" not in report.get("results", {}).values():
        errors = [aot_error_line(r) for r in (report.get("results") or {}).values()]
        return (
            report,
            f"not compiled ahead of time (triton {report.get('triton')}: {errors[0] if errors else 'no arch'})",
        )
    return report, {a: r if r == "ok" else aot_error_line(r) for a, r in (report.get("results") or {}).items()}


_HIP_TARGET = re.compile(rb"amdgcn-amd-amdhsa-[^\x00\s]*?-(gfx[0-9a-f]+)")


def hip_archs(f, chunk=16 << 20):
    """The ``gfx*`` targets of the clang offload bundles (HIP code objects) in the open binary file ``f``, read
    in ``chunk``-byte pieces that overlap by 256 bytes. Pure but for reading ``f``."""
    found, tail = set(), b""
    while True:
        piece = f.read(chunk)
        if not piece:
            break
        data = tail + piece
        found.update(m.group(1).decode() for m in _HIP_TARGET.finditer(data))
        tail = data[-256:]
    return sorted(found)


def _torch_arch_list():
    """(torch.cuda.get_arch_list(), None) from a child Python (no GPU needed: the archs torch was built for), or
    (None, error)."""
    proc = run_python("import json, torch; print('MATRIX-ARCHS', json.dumps(torch.cuda.get_arch_list()))", timeout=300)
    for line in proc.stdout.splitlines():
        if line.startswith("MATRIX-ARCHS "):
            import json

            return json.loads(line[len("MATRIX-ARCHS ") :]), None
    from .common import last_error_line

    return None, last_error_line(proc.stderr) or f"exit {proc.returncode}"


def _triton_ptxas():
    """The path of Triton's bundled ptxas (triton/backends/nvidia/bin/ptxas; TRITON_PTXAS_PATH first), or None."""
    import importlib.util

    configured = os.environ.get("TRITON_PTXAS_PATH")
    if configured and os.access(configured, os.X_OK):
        return configured
    spec = importlib.util.find_spec("triton")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "backends", "nvidia", "bin", "ptxas")
        if os.access(path, os.X_OK):
            return path
    return None


@check(
    "gpu-archs",
    proves=(
        "without a GPU: every architecture of the variant's gpu_archs is covered by torch's arch list, by vLLM's "
        "extensions (SASS, or PTX the driver compiles) and, on CUDA, by Triton: a kernel compiled ahead of time "
        "for each (its bundled ptxas included; `ptxas --help`'s targets where no compile answers)"
    ),
    classes=(24,),
    reports=(f"{_VLLM}/issues/29469", "https://github.com/triton-lang/triton/issues/8539"),
    hint="build (or install) torch, vLLM and Triton for the variant's GPUs, or drop the GPUs they cannot serve "
    "from matrix.yaml gpu_archs",
    timeout=300,
    accelerators=("cuda", "rocm"),
    group="light",
)
def check_gpu_archs(params):
    import struct
    import subprocess

    wanted = list(params.get("gpu_archs") or [])
    accelerator = params.get("accelerator", "cuda")
    if not wanted:
        return result("skipped", f"the variant names no gpu_archs (matrix.yaml) to check the {accelerator} image for")
    torch_archs, error = _torch_arch_list()
    facts = {"gpu_archs": wanted, "torch_archs": torch_archs}
    problems, fixes = [], []
    if torch_archs is None:
        return result("failed", f"torch's arch list cannot be read: {error}", None, **facts)
    if accelerator == "rocm":
        torch_missing = [a for a in wanted if a not in torch_archs]
    else:
        compute = [a.replace("compute_", "sm_") for a in torch_archs if a.startswith("compute_")]
        torch_missing = [
            a for a in wanted if not covered(a, [a2 for a2 in torch_archs if a2.startswith("sm_")], compute)
        ]
    if torch_missing:
        problems.append(
            f"torch {dist_version('torch')} has no kernels for {', '.join(torch_missing)} (torch.cuda.get_arch_list(): "
            f"{', '.join(torch_archs) or 'none'}): `no kernel image is available for execution on the device` there"
        )
        fixes.append("install the torch build whose arch list covers them (PyTorch's index of a newer CUDA/ROCm)")
    extensions = {}
    for path in _vllm_extensions():
        try:
            with open(path, "rb") as f:
                if accelerator == "rocm":
                    extensions[os.path.basename(path)] = {"sass": hip_archs(f), "ptx": []}
                    continue
                section = elf_section(path, ".nv_fatbin")
                found = fatbin_archs(f, section[0], section[0] + section[1]) if section else {"sass": [], "ptx": []}
        except (OSError, struct.error):
            continue
        # A fat binary section whose entries this reader does not know: said so, not taken for no kernels.
        found["fatbin"] = section is not None and section[1] > 0
        extensions[os.path.basename(path)] = found
    facts["vllm_extensions"] = extensions
    kernels = {name: found for name, found in extensions.items() if found["sass"] or found["ptx"]}
    # vLLM's own kernels (_C, _moe_C, as _C_stable_libtorch in 0.33; ROCm: _rocm_C) must cover every GPU of the
    # variant; others are for some GPUs only (FlashMLA, DeepSelect, QuTLASS: Hopper and Blackwell) and are
    # reported, not judged.
    essential = {n: f for n, f in kernels.items() if re.match(r"_(C|moe_C|rocm_C)(_stable_libtorch)?\.", n)}
    essential = essential or kernels
    unreadable = [n for n, f in extensions.items() if not (f["sass"] or f["ptx"]) and f.get("fatbin")]
    facts["unparsed_fatbins"] = unreadable
    if dist_version("vllm") is not None and not unreadable:
        if not kernels:
            problems.append(
                f"vLLM {dist_version('vllm')}'s extensions ({', '.join(extensions) or 'none'}) hold no "
                f"{'HIP code objects' if accelerator == 'rocm' else 'CUDA kernels (no fat binary)'}: not a "
                f"{accelerator} build"
            )
            fixes.append(f"install vLLM's {accelerator} build")
        for name, found in essential.items():
            if accelerator == "rocm":
                lacking = [a for a in wanted if a not in found["sass"]]
            else:
                lacking = [a for a in wanted if not covered(a, found["sass"], found["ptx"])]
            if lacking:
                problems.append(
                    f"vLLM's {name} has no kernel for {', '.join(lacking)} (SASS {', '.join(found['sass']) or 'none'}; "
                    f"PTX {', '.join(found['ptx']) or 'none'})"
                )
                fixes.append("install a vLLM built with those archs (TORCH_CUDA_ARCH_LIST / PYTORCH_ROCM_ARCH)")
    if accelerator == "cuda" and dist_version("triton") is not None:
        report, facts["triton_aot"] = _triton_aot(wanted)
        aot_problems, aot_fixes, facts["triton_compiled"] = aot_findings(report, wanted)
        problems += aot_problems
        fixes += aot_fixes
    if accelerator == "cuda":
        ptxas = _triton_ptxas()
        facts["ptxas"] = ptxas
        if ptxas is not None:
            proc = subprocess.run([ptxas, "--help"], capture_output=True, text=True, timeout=60, check=False)
            targets = ptxas_targets(proc.stdout)
            facts["ptxas_targets"] = targets
            lacking = [a for a in wanted if targets and a not in targets and a + "a" not in targets]
            # The compiles, where they answered, are the proof (Triton may pick another ptxas, ptxas-blackwell).
            if lacking and facts.get("triton_compiled") is None:
                problems.append(
                    f"Triton's ptxas ({ptxas}) cannot target {', '.join(lacking)} (`ptxas fatal : Value '{lacking[0]}' "
                    "is not defined for option 'gpu-name'`): every Triton kernel fails to compile there"
                )
                fixes.append(
                    "install a Triton whose bundled ptxas knows them, or point TRITON_PTXAS_PATH at a CUDA "
                    "toolkit's ptxas that does"
                )
    if problems:
        fixes.append(
            f"or take the GPUs this image cannot serve out of matrix.yaml variants.{params.get('variant')}.gpu_archs"
        )
        return result("failed", "; ".join(problems), "; ".join(dict.fromkeys(fixes)), **facts)
    return result(
        "passed",
        f"{', '.join(wanted)} covered by torch"
        + (
            ", vLLM's extensions"
            if kernels
            else " (no vLLM installed: its extensions not checked)"
            if dist_version("vllm") is None
            else ""
        )
        + (
            " and Triton (a kernel compiled ahead of time for each)"
            if facts.get("triton_compiled")
            else " and Triton's ptxas"
            if facts.get("ptxas")
            else " (no Triton ptxas to ask)"
            if accelerator == "cuda"
            else ""
        ),
        **facts,
    )


# --- JIT toolchains at run time (class 25) ---------------------------------------------------------------------
# Distributions of FlashInfer's prebuilt kernels: with one installed, FlashInfer needs no compiler for them.
FLASHINFER_PREBUILT = ("flashinfer-jit-cache", "flashinfer-cubin")
# The CUDA headers FlashInfer's JIT sources include (and the wheels that ship them under nvidia/*/include).
CUDA_HEADERS = {"cublasLt.h": "nvidia-cublas", "curand.h": "nvidia-curand"}


def _site_dirs():
    """The folders Python imports installed packages from (site-packages), as sysconfig names them."""
    import sysconfig

    return sorted({p for p in (sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")) if p})


def find_tool(name, env, site_dirs):
    """The path of CUDA tool ``name`` (nvcc, cuobjdump): ``$CUDA_HOME/bin``, ``PATH``, then the NVIDIA wheels
    (``nvidia/cuda_nvcc/bin``, ``nvidia/cu*/bin``); None where none has it."""
    import shutil

    home = env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda"
    candidates = [os.path.join(home, "bin", name)]
    found = shutil.which(name, path=env.get("PATH"))
    if found:
        candidates.insert(0, found)
    for site in site_dirs:
        candidates += sorted(glob.glob(os.path.join(site, "nvidia", "*", "bin", name)))
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def find_header(name, env, site_dirs):
    """The path of CUDA header ``name``: ``$CUDA_HOME/include``, ``/usr/include``, then the NVIDIA wheels'
    ``nvidia/*/include``; None where none has it."""
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda"
    candidates = [os.path.join(home, "include", name), os.path.join("/usr/include", name)]
    for site in site_dirs:
        candidates += sorted(glob.glob(os.path.join(site, "nvidia", "*", "include", name)))
    return next((c for c in candidates if os.path.isfile(c)), None)


def toolchain_problems(*, libraries, prebuilt, nvcc, headers, c_compiler, python_h):
    """(problems, fixes) of the JIT toolchains the installed ``libraries`` (a set of triton, flashinfer,
    deep_gemm) need: Triton a C compiler and Python.h for its launcher; FlashInfer nvcc and ``CUDA_HEADERS``
    unless ``prebuilt`` names an installed FLASHINFER_PREBUILT distribution; DeepGEMM nvcc. ``headers``:
    {header: path or None}. Pure."""
    problems, fixes = [], []
    if "triton" in libraries:
        lacking = [
            what for what, have in (("a C compiler (cc/gcc, or CC)", c_compiler), ("Python.h", python_h)) if not have
        ]
        if lacking:
            problems.append(
                f"Triton builds its launcher at the first kernel and this image has no {' and no '.join(lacking)}: "
                "`Failed to find C compiler` or `Python.h: No such file or directory` then"
            )
            fixes.append("install gcc and this Python's headers (apt-get install gcc python3-dev)")
    if "flashinfer" in libraries and not prebuilt:
        lacking = ([] if nvcc else ["nvcc"]) + [h for h, path in headers.items() if not path]
        if lacking:
            problems.append(
                "FlashInfer compiles its kernels at run time and this image has neither its prebuilt kernels ("
                f"{', '.join(FLASHINFER_PREBUILT)}) nor {', '.join(lacking)}"
            )
            wheels = ["nvidia-cuda-nvcc"] * (not nvcc) + [CUDA_HEADERS[h] for h in lacking if h in CUDA_HEADERS]
            fixes.append(
                "pip install flashinfer-jit-cache (FlashInfer's kernels prebuilt for the archs) or flashinfer-cubin, "
                f"or the CUDA parts it compiles with ({', '.join(wheels)} for this CUDA)"
            )
    if "deep_gemm" in libraries and not nvcc:
        problems.append("DeepGEMM compiles its kernels at run time with nvcc, which this image does not have")
        fixes.append("install nvcc (nvidia-cuda-nvcc for this CUDA, or a CUDA toolkit), or set VLLM_USE_DEEP_GEMM=0")
    return problems, fixes


@check(
    "jit-toolchain",
    proves=(
        "without a GPU: what the image's kernel libraries compile with at run time is there (Triton: a C compiler "
        "and Python.h; FlashInfer: nvcc, cublasLt.h and curand.h, or its prebuilt kernels; DeepGEMM: nvcc)"
    ),
    classes=(25,),
    reports=(f"{_VLLM}/issues/49497", f"{_VLLM}/issues/33833"),
    hint="install the toolchain the kernel libraries compile with, or their prebuilt kernels",
    timeout=120,
    accelerators=("cuda",),
    group="light",
)
def check_jit_toolchain(params):
    import importlib.util
    import shutil
    import sysconfig

    env = dict(os.environ)
    libraries = set()
    for name in ("triton", "flashinfer", "deep_gemm"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin not in (None, "namespace"):
            libraries.add(name)
    sites = _site_dirs()
    prebuilt = [d for d in FLASHINFER_PREBUILT if dist_version(d)]
    nvcc = find_tool("nvcc", env, sites)
    headers = {h: find_header(h, env, sites) for h in CUDA_HEADERS}
    compiler = env.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    python_h = os.path.join(sysconfig.get_paths().get("include") or "", "Python.h")
    facts = {
        "libraries": sorted(libraries),
        "flashinfer_prebuilt": prebuilt,
        "nvcc": nvcc,
        "cuobjdump": find_tool("cuobjdump", env, sites),
        "headers": headers,
        "c_compiler": compiler,
        "python_h": python_h if os.path.isfile(python_h) else None,
    }
    if not libraries:
        return result("passed", "no kernel library that compiles at run time (Triton, FlashInfer, DeepGEMM)", **facts)
    problems, fixes = toolchain_problems(
        libraries=libraries,
        prebuilt=prebuilt,
        nvcc=nvcc,
        headers=headers,
        c_compiler=compiler,
        python_h=facts["python_h"],
    )
    if problems:
        return result("failed", "; ".join(problems), "; ".join(fixes), **facts)
    return result(
        "passed",
        f"{', '.join(sorted(libraries))}: their run-time compilers and headers are there"
        + (f" (FlashInfer's kernels prebuilt: {', '.join(prebuilt)})" if prebuilt else ""),
        **facts,
    )
