"""The command-line flags of deployment profiles (``--profile`` and one flag per condition) for ``run`` and ``test``.

They reach the command as one argument, ``choice: profiles.ProfileChoice`` (README "Deployment profiles").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from matrixtool import profiles


def options(default_names: tuple[str, ...]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--profile and the flags that override one condition (README "Deployment profiles"), as one
    ``choice: profiles.ProfileChoice`` argument."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(*args: Any, **kw: Any) -> Any:
            try:
                overrides = profiles.Overrides(
                    user=kw.pop("user"),
                    read_only=kw.pop("read_only"),
                    tmpfs=profiles.parse_tmpfs(kw.pop("tmpfs")),
                    memory=kw.pop("memory"),
                    cpus=kw.pop("cpus"),
                    network=kw.pop("network"),
                    env=profiles.parse_env(kw.pop("env")),
                )
            except ValueError as exc:
                raise click.BadParameter(str(exc)) from exc
            names = tuple(kw.pop("profile_names")) or default_names
            return f(*args, choice=profiles.ProfileChoice(names=names, overrides=overrides), **kw)

        default = ", ".join(default_names) if default_names else "every profile of the variant"
        for option in reversed(
            [
                click.option(
                    "--profile",
                    "profile_names",
                    multiple=True,
                    help=f"Deployment profile (repeatable; default: {default}).",
                ),
                click.option(
                    "--user", default=None, help="Run as UID[:GID], e.g. 1000770000:0 (overrides the profile)."
                ),
                click.option(
                    "--read-only/--no-read-only", "read_only", default=None, help="Read-only root filesystem or not."
                ),
                click.option(
                    "--tmpfs", multiple=True, help="Mount a tmpfs: PATH[:OPTS], e.g. /tmp:rw,exec (repeatable)."
                ),
                click.option("--memory", default=None, help="Memory limit in Docker's units, e.g. 4g."),
                click.option(
                    "--cpus", type=click.FloatRange(min=0.01), default=None, help="CPU quota in CPUs, e.g. 1.5."
                ),
                click.option("--network", default=None, help="Docker network mode, e.g. none."),
                click.option("--env", multiple=True, help="Extra environment variable KEY=VALUE (repeatable)."),
            ]
        ):
            wrapper = option(wrapper)
        return wrapper

    return wrap
