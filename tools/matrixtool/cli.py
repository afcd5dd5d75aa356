"""``tools/matrix`` (installed: ``matrix``): the click group and the registration of the commands.

Errors print one ``error:`` message and exit with the code of their class (``errors.ExitCode``); ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import docker

from matrixtool.commands import _params, _registry
from matrixtool.commands._shared import Settings
from matrixtool.core import engine, interrupts, outlock, process
from matrixtool.core.errors import ExitCode, MatrixError
from matrixtool.core.untrusted import shown
from matrixtool.model.model import DEFAULT_MATRIX

# --out's default: build/ next to the matrix file.
DEFAULT_OUT_NAME = "build"


class _UsageLine(click.ClickException):
    """A usage error shown as one ``error:`` line (click's own shows the usage text and ``Error:``), exit 2."""

    exit_code = int(ExitCode.USAGE)

    def __init__(self, exc: click.UsageError) -> None:
        command = exc.ctx.command_path if exc.ctx is not None else "tools/matrix"
        super().__init__(f"{exc.format_message().rstrip('.')}; see '{command} --help'")

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


# click >= 8.2 raises this (a UsageError whose message is the help text) for a bare ``tools/matrix``.
_NO_ARGS_IS_HELP: tuple[type[Exception], ...] = tuple(
    e for e in [getattr(click.exceptions, "NoArgsIsHelpError", None)] if isinstance(e, type)
)


def _traceback_if_debug(ctx: click.Context) -> None:
    """Print the current exception's traceback to stderr when ``--debug`` was given."""
    if ctx.obj is not None and ctx.obj.debug:
        traceback.print_exc()


class MatrixGroup(click.Group):
    """A click group that turns ``MatrixError`` into one message and its exit code, and a usage error into
    one ``error:`` line (exit 2)."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except _NO_ARGS_IS_HELP:
            raise  # no command at all: click shows the help
        except click.UsageError as exc:
            raise _UsageLine(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with interrupts.handled(process.terminate_running):
                return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            # Ctrl-C or SIGTERM: context managers have removed the smoke container, builds were ended.
            _traceback_if_debug(ctx)
            code = interrupts.exit_code_of(exc)
            signal_name = "SIGTERM" if code is ExitCode.TERMINATED else "SIGINT"
            click.echo(
                f"error: interrupted by {signal_name}; running builds and smoke containers were stopped", err=True
            )
            ctx.exit(int(code))
        except MatrixError as exc:
            _traceback_if_debug(ctx)
            click.echo(f"error: {shown(str(exc), lines=True)}", err=True)
            ctx.exit(int(exc.exit_code))
        except docker.errors.APIError as exc:
            # The engine answered, and refused: not an unreachable engine.
            _traceback_if_debug(ctx)
            click.echo(
                f"error: the Docker engine refused a request: {shown(str(exc.explanation or exc))}; "
                "run 'tools/matrix doctor' to check the engine",
                err=True,
            )
            ctx.exit(int(ExitCode.ENGINE))
        except docker.errors.DockerException as exc:
            _traceback_if_debug(ctx)
            click.echo(f"error: Docker engine: {shown(str(exc))}; run 'tools/matrix doctor'", err=True)
            ctx.exit(int(ExitCode.ENGINE))
        except engine.GONE as exc:
            # The engine stopped or restarted under a request (the SDK raises requests' errors for a broken socket).
            _traceback_if_debug(ctx)
            env = ctx.obj.env if ctx.obj is not None else dict(os.environ)
            click.echo(f"error: {engine.gone_message(env, 'the run', str(exc))}", err=True)
            ctx.exit(int(ExitCode.ENGINE))
        except click.UsageError as exc:
            raise _UsageLine(exc) from exc
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except Exception as exc:
            # A bug of this tool, not bad input: one line, and the traceback only with --debug.
            _traceback_if_debug(ctx)
            click.echo(
                f"error: unexpected {type(exc).__name__}: {shown(str(exc))}; rerun with --debug for the traceback and "
                "report it",
                err=True,
            )
            ctx.exit(int(ExitCode.UNEXPECTED))


@click.group(cls=MatrixGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--matrix",
    "matrix_path",
    type=_params.INPUT_FILE,
    default=DEFAULT_MATRIX,
    show_default=True,
    help="The matrix file.",
)
@click.option(
    "--out",
    "out_dir",
    type=_params.OUTPUT_FOLDER,
    default=None,
    help="Folder for logs, reports and staged build contexts.  [default: build/ next to the matrix file]",
)
@click.option(
    "--no-wait",
    is_flag=True,
    help="When another run holds --out (its .lock), refuse at once (exit 19) instead of waiting for it.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def main(ctx: click.Context, matrix_path: Path, out_dir: Path | None, no_wait: bool, debug: bool) -> None:
    """Build and smoke-test vLLM inference images from matrix.yaml."""
    out = out_dir if out_dir is not None else matrix_path.parent / DEFAULT_OUT_NAME
    ctx.obj = Settings(matrix_path=matrix_path, out_dir=out, env=dict(os.environ), debug=debug, no_wait=no_wait)


def _holding_out(callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback`` run with the lock of ``--out`` held (``outlock.held``): after its flags were parsed (a
    ``--help`` takes no lock), released when it returns or raises."""

    @functools.wraps(callback)
    def locked(*args: Any, **kwargs: Any) -> Any:
        settings = click.get_current_context().find_object(Settings)
        assert settings is not None
        with outlock.held(
            settings.out_dir,
            argv=["tools/matrix", *sys.argv[1:]],
            wait=not settings.no_wait,
            notice=lambda line: click.echo(line, err=True),
        ):
            return callback(*args, **kwargs)

    return locked


def _checking_inputs(callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback`` run once every parameter of an input kind (``_params.Kind``) keeps its rule, the group's
    included; before the ``--out`` lock is waited for. Raises ConfigError: naming each broken one (exit 3)."""

    @functools.wraps(callback)
    def checked(*args: Any, **kwargs: Any) -> Any:
        _params.check(click.get_current_context())
        return callback(*args, **kwargs)

    return checked


for _command in _registry.all_commands():
    if _command.name in outlock.WRITERS and _command.callback is not None:
        _command.callback = _holding_out(_command.callback)
    if _command.callback is not None:
        _command.callback = _checking_inputs(_command.callback)
    main.add_command(_command)
