"""How an image's users must start its server, read from the image's config (``docker image inspect``'s
``Config``: ENTRYPOINT, CMD, USER, WORKDIR, ENV, HEALTHCHECK) and, where the ENTRYPOINT is a script, from the
script itself (``choose``, a pure function of the config and the image's files).

The documented forms (docs/checks.md "How the server is started"), the arguments ``docker run IMAGE ...`` gives:

- ``vllm-serve``: ``ENTRYPOINT ["vllm", "serve"]`` (vLLM's own recent images): ``MODEL OPTIONS``;
- ``vllm``: ``ENTRYPOINT ["vllm"]`` (this project's images): ``serve MODEL OPTIONS``;
- ``api-server``: ``ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]`` (older images and many
  derived ones): ``--model MODEL OPTIONS``;
- ``wrapper``: an ENTRYPOINT script (or an init such as tini) that runs its arguments (``exec "$@"``): the whole
  server command, ``vllm serve MODEL OPTIONS``; or one that starts the server with its arguments
  (``exec vllm serve "$@"``): what that server takes;
- ``command``: no ENTRYPOINT: the server command as the command (``vllm serve MODEL OPTIONS``, or ``python3 -m
  vllm.entrypoints.openai.api_server --model MODEL OPTIONS`` where the image has no ``vllm`` on its PATH).

Anything else cannot be served by a documented form (``Start.problem`` says why, in words): the shell form of
ENTRYPOINT (``/bin/sh -c 'vllm serve'`` drops every argument of ``docker run``), a script that starts the server
with arguments of its own, an ENTRYPOINT program the image lacks. ``Start.fix`` is then the ``--entrypoint`` that
would work (the image's ``vllm`` console script, else its ``python3`` with vLLM's API server module).

``ImageFiles`` reads the image's files for ``choose`` from a created, never started container.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import re
import shlex
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import docker
import docker.errors

from matrixtool.core.container import ContainerSpec, TrackedContainer

VLLM_SERVE, VLLM, API_SERVER, WRAPPER, COMMAND, NONE = "vllm-serve", "vllm", "api-server", "wrapper", "command", "none"
API_MODULE = "vllm.entrypoints.openai.api_server"
CLI_MODULE = "vllm.entrypoints.cli.main"
# Docker's PATH for an image that sets none (the engine's default in a container).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Init programs that run their arguments (an ENTRYPOINT of `tini --`, `dumb-init --`: the server command follows).
INITS = frozenset({"tini", "tini-static", "dumb-init", "catatonit", "docker-init"})
SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "busybox"})
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")
# The most bytes read of an ENTRYPOINT program (a script; a binary is only told from its first bytes).
READ_LIMIT = 256 * 1024


class Files(Protocol):
    """The image's files, as ``choose`` reads them."""

    def read(self, path: str) -> bytes | None:
        """The first ``READ_LIMIT`` bytes of the regular file at ``path`` (symbolic links followed); None where
        the image has none."""


@dataclass(frozen=True, kw_only=True)
class ImageConfig:
    """The parts of an image's config that say how it starts (``docker image inspect``'s ``Config``).
    ``healthcheck``: its ``Test`` (empty: none)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    workdir: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    healthcheck: tuple[str, ...] = ()

    @classmethod
    def of(cls, attrs: Mapping[str, Any]) -> ImageConfig:
        """From ``docker image inspect`` attributes (``attrs["Config"]``)."""
        config = attrs.get("Config") or {}
        env = dict(str(p).partition("=")[::2] for p in config.get("Env") or [])
        test = (config.get("Healthcheck") or {}).get("Test") or []
        return cls(
            entrypoint=tuple(str(a) for a in config.get("Entrypoint") or []),
            cmd=tuple(str(a) for a in config.get("Cmd") or []),
            user=str(config.get("User") or ""),
            workdir=str(config.get("WorkingDir") or ""),
            env=env,
            healthcheck=tuple(str(t) for t in test),
        )

    @property
    def path(self) -> str:
        return self.env.get("PATH") or DEFAULT_PATH

    def facts(self) -> dict[str, Any]:
        """What the report shows of it: ENTRYPOINT, CMD, USER, WORKDIR, the names of ENV, HEALTHCHECK."""
        return {
            "entrypoint": list(self.entrypoint),
            "cmd": list(self.cmd),
            "user": self.user or "root (none set)",
            "workdir": self.workdir or "/",
            "env": sorted(self.env),
            "healthcheck": list(self.healthcheck) or None,
        }


@dataclass(frozen=True, kw_only=True)
class Start:
    """How the server is started: ``form`` (one of the module's forms, ``NONE``: no documented form serves it),
    ``how`` in words; the arguments of ``docker run IMAGE`` are ``prefix``, then ``--model`` where ``model_flag``
    (vLLM's API server module), the model, the options. ``entrypoint``: None keeps the image's (every documented
    form); set only on ``fix``. ``problem``: why no documented form serves it (form ``NONE``), and ``fix`` the
    start with ``--entrypoint`` that would (None: the image has neither ``vllm`` nor ``python3``)."""

    form: str
    how: str
    prefix: tuple[str, ...] = ()
    model_flag: bool = False
    entrypoint: tuple[str, ...] | None = None
    problem: str = ""
    fix: Start | None = None

    def args(self, model: str, options: Sequence[str]) -> list[str]:
        """The arguments after the image's name."""
        return [*self.prefix, *(["--model"] if self.model_flag else []), model, *options]


def shown(argv: Sequence[str]) -> str:
    """An exec-form array as a Dockerfile writes it: ``["vllm", "serve"]``."""
    return "[" + ", ".join(f'"{a}"' for a in argv) + "]"


def which(files: Files, name: str, path: str) -> str | None:
    """The first ``name`` on ``path`` (the image's PATH) that the image has (as ``exec`` finds it)."""
    for folder in path.split(":"):
        candidate = posixpath.join(folder or ".", name)
        if files.read(candidate) is not None:
            return candidate
    return None


def server_command(config: ImageConfig, files: Files) -> Start | None:
    """The server as a whole command: ``vllm serve`` where the image has ``vllm`` on its PATH, else ``python3 -m``
    vLLM's API server module where it has ``python3``; None: neither."""
    if which(files, "vllm", config.path):
        return Start(form=COMMAND, how="vllm serve", prefix=("vllm", "serve"))
    if which(files, "python3", config.path):
        api = ("python3", "-m", API_MODULE)
        return Start(form=COMMAND, how=f"python3 -m {API_MODULE}", prefix=api, model_flag=True)
    return None


def _unservable(config: ImageConfig, files: Files, problem: str) -> Start:
    """No documented form: ``problem``, and the ``--entrypoint`` that would serve it (``server_command``)."""
    command = server_command(config, files)
    fix = None
    if command is not None:
        fix = Start(
            form=NONE,
            how=f"--entrypoint {command.prefix[0]}",
            entrypoint=command.prefix[:1],
            prefix=command.prefix[1:],
            model_flag=command.model_flag,
        )
    else:
        problem += f"; and the image has neither vllm nor python3 on its PATH ({config.path})"
    return Start(form=NONE, how="no documented form", problem=problem, fix=fix)


def _passes_on(config: ImageConfig, files: Files, how: str, dollar0: bool = False) -> Start:
    """An ENTRYPOINT (or none) that runs its arguments: the server command (``server_command``) as arguments;
    ``dollar0``: ``sh -c`` takes the first as ``$0``, so a placeholder ``sh`` comes first."""
    command = server_command(config, files)
    if command is None:
        return _unservable(config, files, f"{how}, but the image has neither vllm nor python3 on its PATH")
    form, words = (WRAPPER, "as arguments") if config.entrypoint else (COMMAND, "as the command")
    return Start(
        form=form,
        how=f"{how}: `{command.how} MODEL ...` {words}",
        prefix=(*(("sh",) if dollar0 else ()), *command.prefix),
        model_flag=command.model_flag,
    )


def choose(config: ImageConfig, files: Files) -> Start:
    """How ``config``'s image must be started to serve a model (see the module docstring for the forms)."""
    entry = list(config.entrypoint)
    if not entry:
        return _passes_on(config, files, "no ENTRYPOINT")
    if posixpath.basename(entry[0]) in INITS:
        rest = entry[1:]
        while rest and rest[0].startswith("-"):
            done = rest.pop(0) == "--"
            if done:
                break
        if not rest:
            return _passes_on(config, files, f"ENTRYPOINT {shown(entry)} (an init that runs its arguments)")
        entry = rest
    return _program(config, files, entry)


def _program(config: ImageConfig, files: Files, entry: list[str]) -> Start:
    """``entry`` (the ENTRYPOINT, an init in front left out) by its program."""
    name, rest = posixpath.basename(entry[0]), entry[1:]
    ep = shown(config.entrypoint)
    if name == "vllm":
        return _vllm_cli(config, files, rest, ep)
    if _PYTHON.match(name):
        module = _python_module(rest)
        if module is not None and module[0] == API_MODULE:
            return Start(form=API_SERVER, how=f"ENTRYPOINT {ep}: `--model MODEL ...` as arguments", model_flag=True)
        if module is not None and module[0] == CLI_MODULE:
            return _vllm_cli(config, files, module[1], ep)
        what = f"-m {module[0]}" if module is not None else "a Python program"
        return _unservable(config, files, f"the ENTRYPOINT {ep} runs {what}, not vLLM's server")
    if name in SHELLS and rest and rest[0].startswith("-") and "c" in rest[0] and len(rest) > 1:
        return _script(config, files, rest[1], f"ENTRYPOINT {ep} (a shell command)", shell_c=True)
    if name in SHELLS and rest:
        text = files.read(_resolve(rest[0], config))
        if text is None:
            return _unservable(config, files, f"the ENTRYPOINT {ep} runs {rest[0]}, which the image does not have")
        return _script(config, files, text.decode(errors="replace"), f"ENTRYPOINT {ep} (a shell script)")
    located = _locate(entry[0], config, files)
    data = files.read(located) if located else None
    if data is None:
        return _unservable(config, files, f"the ENTRYPOINT {ep} names {entry[0]}, which the image does not have")
    if data.startswith(b"#!"):
        interpreter = data[2:].split(b"\n", 1)[0].decode(errors="replace").split()
        words = [posixpath.basename(w) for w in interpreter[:2]]
        if any(w in SHELLS for w in words):
            return _script(config, files, data.decode(errors="replace"), f"ENTRYPOINT {ep} (a shell script)")
        if any(_PYTHON.match(w) for w in words) and b"vllm.entrypoints.cli.main import main" in data:
            return _vllm_cli(config, files, rest, ep)  # a console script of vllm under another name
    return _unservable(
        config, files, f"the ENTRYPOINT {ep} is a program this tool cannot tell runs vLLM's server ({located})"
    )


def _vllm_cli(config: ImageConfig, files: Files, rest: list[str], ep: str) -> Start:
    """vLLM's CLI as the ENTRYPOINT, with ``rest`` after it."""
    if not rest:
        return Start(form=VLLM, how=f"ENTRYPOINT {ep}: `serve MODEL ...` as arguments", prefix=("serve",))
    if rest[0] == "serve":
        return Start(form=VLLM_SERVE, how=f"ENTRYPOINT {ep}: `MODEL ...` as arguments")
    return _unservable(config, files, f"the ENTRYPOINT {ep} runs `vllm {rest[0]}`, not `vllm serve`")


def _python_module(rest: list[str]) -> tuple[str, list[str]] | None:
    """(module, its arguments) of a Python command line's ``-m MODULE`` (interpreter options before it)."""
    for i, arg in enumerate(rest):
        if arg == "-m" and i + 1 < len(rest):
            return rest[i + 1], rest[i + 2 :]
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:], rest[i + 1 :]
        if not arg.startswith("-"):
            return None
    return None


def _resolve(path: str, config: ImageConfig) -> str:
    """``path`` as the engine opens it: relative to the image's WORKDIR."""
    return posixpath.normpath(posixpath.join(config.workdir or "/", path))


def _locate(program: str, config: ImageConfig, files: Files) -> str | None:
    """Where the engine finds ``program``: a path (relative to WORKDIR), else the first on the image's PATH."""
    if "/" in program:
        return _resolve(program, config)
    return which(files, program, config.path)


# A command that runs the script's arguments: `exec "$@"` (or `"$@"` alone, or unquoted).
_RUNS_ARGS = re.compile(r'(?:^|[;&|(]|\bexec|\bthen|\belse|\bdo)\s*"?\$(?:@|\{@\})"?\s*(?:$|[;&|)])', re.MULTILINE)
_SERVER = (
    (re.compile(r"\bvllm\s+serve\b"), False),
    (re.compile(r"-m\s+" + re.escape(CLI_MODULE) + r"\s+serve\b"), False),
    (re.compile(r"-m\s+" + re.escape(API_MODULE) + r"\b"), True),
)
_ARGS = re.compile(r"\$(?:@|\*|\{@\}|\{\*\})")


def _code(text: str) -> str:
    """``text`` less its comments (a ``#`` at a line's start or after a space) and line continuations."""
    lines = [re.sub(r"(^|\s)#.*$", "", line) for line in text.replace("\\\n", " ").splitlines()]
    return "\n".join(lines)


def _script(config: ImageConfig, files: Files, text: str, what: str, *, shell_c: bool = False) -> Start:
    """A shell script (``shell_c``: a ``sh -c`` string, which takes its first argument as ``$0``) by what it does:
    runs its arguments (``exec "$@"``); starts the server with them (``exec vllm serve "$@"``); starts it with
    arguments of its own (no documented form); or neither."""
    code = _code(text)
    if _RUNS_ARGS.search(code):
        return _passes_on(config, files, f'{what}, which runs its arguments (`exec "$@"`)', dollar0=shell_c)
    for pattern, model_flag in _SERVER:
        line = next((ln.strip() for ln in code.splitlines() if pattern.search(ln)), None)
        if line is None:
            continue
        if _ARGS.search(line):
            takes = "`--model MODEL ...`" if model_flag else "`MODEL ...`"
            return Start(
                form=WRAPPER,
                how=f"{what}, which starts the server with its arguments (`{line}`): {takes} as arguments",
                prefix=("sh",) if shell_c else (),
                model_flag=model_flag,
            )
        if shell_c:
            problem = (
                f"the ENTRYPOINT {shown(config.entrypoint)} is the shell form (`/bin/sh -c {shlex.quote(text)}`): "
                "the shell drops every argument of docker run and the image's CMD, so no model reaches the server"
            )
        else:
            problem = (
                f'the {what} starts the server with arguments of its own (`{line}`, no "$@"): '
                "the arguments of docker run never reach the server"
            )
        return _unservable(config, files, problem)
    return _unservable(config, files, f'the {what} neither runs its arguments (exec "$@") nor starts vLLM\'s server')


class ImageFiles:
    """``Files`` of an image: a container of it created (never started) on first use, labelled with ``session``
    (a signal's sweep finds it), removed on the way out (``with``). Reads are remembered."""

    def __init__(self, client: docker.DockerClient, image: str, *, session: str) -> None:
        self.client, self.image, self.session = client, image, session
        self.stack = contextlib.ExitStack()
        self.tracked: TrackedContainer | None = None
        self.seen: dict[str, bytes | None] = {}

    def __enter__(self) -> ImageFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def read(self, path: str) -> bytes | None:
        """``Files.read``: a symbolic link is followed (at most 8 times); an engine error reads as no file.

        Raises docker.errors.DockerException: the engine refused to create the container."""
        if path not in self.seen:
            self.seen[path] = self._read(path, 8)
        return self.seen[path]

    def _read(self, path: str, hops: int) -> bytes | None:
        if self.tracked is None:
            spec = ContainerSpec(image=self.image, entrypoint=["true"], command=[])
            self.tracked = self.stack.enter_context(
                TrackedContainer(self.client, spec, session=self.session, create_only=True)
            )
        try:
            chunks, stat = self.tracked.held().get_archive(path)
        except docker.errors.DockerException:
            return None
        stat = stat or {}
        mode, link = int(stat.get("mode") or 0), str(stat.get("linkTarget") or "")
        if mode & _GO_MODE_SYMLINK and link and hops > 0:
            return self._read(posixpath.normpath(posixpath.join(posixpath.dirname(path), link)), hops - 1)
        if mode & (_GO_MODE_DIR | _GO_MODE_SYMLINK):
            return None
        return _content(chunks)


# Go's os.FileMode bits of the engine's stat of a path (the archive API's X-Docker-Container-Path-Stat).
_GO_MODE_DIR, _GO_MODE_SYMLINK = 1 << 31, 1 << 27


def _content(chunks: Iterator[bytes]) -> bytes:
    """The first ``READ_LIMIT`` bytes of the one regular file of a ``get_archive`` tar stream (read no further)."""
    buffer = io.BytesIO()
    for chunk in chunks:
        buffer.write(chunk)
        if buffer.tell() > READ_LIMIT + 4096:
            break
    raw = buffer.getvalue()
    try:
        header = tarfile.TarInfo.frombuf(raw[:512], "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return b""
    if header.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
        return raw[512 : 512 + min(header.size, READ_LIMIT)]
    # A pax or long-name header first: read as a whole (small files only).
    with contextlib.suppress(tarfile.TarError, EOFError), tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as archive:
        member = next((m for m in archive if m.isfile()), None)
        handle = archive.extractfile(member) if member is not None else None
        return handle.read(READ_LIMIT) if handle is not None else b""
    return b""
