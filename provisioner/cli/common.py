"""Helpers shared by the command modules: site resolution and error-to-exit-code mapping."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, ParamSpec, TypeVar

import click
import typer

from provisioner import resources
from provisioner.errors import ExitCode, ProvisionerError

if TYPE_CHECKING:
    from provisioner import power
    from provisioner.console import Console
    from provisioner.inventory import Finding, LoadedSite

# Every command module imports this one: what it needs only once a command runs (the
# inventory's models, the console) is imported there, so that a command starts in the
# time its own imports take (tests/unit/test_cli_startup.py).

P = ParamSpec("P")
R = TypeVar("R")

SITE_ENV = "PROVISION_SITE"
DEFAULT_SITE = Path("inventories/example")

SiteArg = Annotated[
    Path | None,
    typer.Argument(
        help="Site inventory: a directory of YAML files or one file. "
        f"Default: ${SITE_ENV}, else the embedded example site (inventories/example).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (for CI).")]


def resolve_site(arg: Path | None) -> Path:
    """The site to use: the argument, $PROVISION_SITE, or the embedded example."""
    if arg is not None:
        return arg
    env = os.environ.get(SITE_ENV)
    if env:
        return Path(env)
    if DEFAULT_SITE.exists():
        return DEFAULT_SITE
    return resources.example_site()


def load_checked(site: Path | None, basis: power.Basis = "nameplate") -> LoadedSite:
    """The site a command acts on: resolved, loaded and checked as `provision validate`
    checks it (the site as written); refused (exit 3, validate's errors) when validate would
    say it is invalid. Where `provision lab up` runs a lab for it, the site the command gets
    is that one with the lab's endpoints (lab/overlay.py), and profile.for_site says lab.
    Every command that reads a site comes through here (tests/unit/test_one_truth.py)."""
    from provisioner.inventory.valid import load_valid
    from provisioner.state.dir import running_lab_file

    path = resolve_site(site)
    loaded = load_valid(path, basis)
    if not running_lab_file(loaded.base_dir.resolve()).is_file():
        return loaded
    # the lab's package is imported only where a lab runs (every command's start pays for
    # what it imports)
    from provisioner.lab import overlay

    return overlay.load(path)


def exit_code(findings: list[Finding]) -> ExitCode:
    """validate's verdict on its findings: 3 when every command refuses the site
    (inventory.refusing), else 4 when racks are over budget, else 0 (warnings allowed)."""
    from provisioner.inventory.findings import errors
    from provisioner.inventory.valid import refusing

    if refusing(findings):
        return ExitCode.INVENTORY
    return ExitCode.BUDGET if errors(findings) else ExitCode.OK


class State:
    """Global options, kept on the Typer context."""

    debug: bool = False
    no_color: bool = False


STATE = State()


def console(json_mode: bool = False) -> Console:
    from provisioner.console import Console

    return Console(json_mode=json_mode, no_color=STATE.no_color)


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn a ProvisionerError into one clear message and its exit code (traceback with --debug)."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ProvisionerError as exc:
            if STATE.debug:  # the traceback, then the same line and exit code as without
                _traceback()
            console().error(exc)
            raise typer.Exit(int(exc.exit_code)) from None
        except KeyboardInterrupt:
            console().err.print("interrupted")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except (typer.Exit, typer.Abort, click.exceptions.ClickException):
            raise
        except Exception as exc:
            if STATE.debug:
                _traceback()
            # A bug: one line, no locals (they may hold secrets), no traceback unless --debug.
            console().err.print(
                f"[bold red]internal error:[/] {type(exc).__name__} (a bug in provisioner; "
                "rerun with --debug for the traceback and report it)")
            raise typer.Exit(int(ExitCode.INTERNAL)) from None

    return wrapper


def _traceback() -> None:
    """The current exception's traceback on stderr, without locals (they may hold secrets)."""
    console().err.print_exception(show_locals=False)


class StopRequest(threading.Event):
    """Set by the first Ctrl-C (or SIGTERM): start nothing new, let what is in flight finish.
    `abort` is set by the second Ctrl-C: cancel what is in flight now (a playbook)."""

    def __init__(self) -> None:
        super().__init__()
        self.abort = threading.Event()


@contextmanager
def graceful_stop(notice: str, abort_notice: str = "") -> Iterator[StopRequest]:
    """Two levels of stop. The first Ctrl-C (or SIGTERM) sets the event (the command
    finishes what is in flight and stops) and prints `notice`. The second Ctrl-C sets
    `abort` and prints `abort_notice` when one is given (the command watches `abort` and
    cancels its work in flight); without one, or at a third Ctrl-C, it raises
    KeyboardInterrupt at once."""
    stop = StopRequest()
    err = console().err

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            if not abort_notice or stop.abort.is_set():
                raise KeyboardInterrupt
            stop.abort.set()
            err.print(abort_notice)
            return
        stop.set()
        if notice:
            err.print(notice)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
