"""The `provision` app: its global options, its logging, and its commands, each imported
only when the command line names it (build), so `provision bmc on` does not pay for the
report, upgrade and fabric modules."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from provisioner import __version__
from provisioner.errors import redact

# The libraries at the protocol edges log on their own (paramiko prints a whole traceback
# when a port answers without SSH). Their records go nowhere; with --debug, to stderr,
# redacted. Our own messages reach the user through the console alone.
QUIET_LOGGERS = ("paramiko", "netmiko", "urllib3", "requests", "sushy", "pyghmi", "kubernetes",
                 "ansible_runner", "ansible-runner", "websocket")


class RedactingFormatter(logging.Formatter):
    """Formats a record, traceback included, then redacts the whole text."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The one handler this CLI installs (found again by its class on a second call)."""


def configure_logging(debug: bool) -> None:
    """Route every library's log records once per process: to nothing, or with `debug` to
    stderr through RedactingFormatter. Python's last-resort handler (stderr, warnings and
    up) is never reached: the root logger always has our handler."""
    handler: logging.Handler = _Handler(sys.stderr) if debug else logging.NullHandler()
    handler.setFormatter(RedactingFormatter("%(name)s: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler | logging.NullHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    for name in QUIET_LOGGERS:
        lib = logging.getLogger(name)
        lib.setLevel(logging.DEBUG if debug else logging.CRITICAL + 1)
        lib.propagate = debug  # never to a handler someone else put on the root
    # Python warnings are not log records: urllib3's InsecureRequestWarning (tls.verify
    # false) stays on stderr on purpose, the operator asked for an unverified BMC.


def _version(value: bool) -> None:
    if value:
        typer.echo(f"provision {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help="Plain output.")] = False,
) -> None:
    """Global options."""
    from provisioner.cli.common import STATE  # the commands' helpers: imported with a command

    configure_logging(debug)
    STATE.debug = debug
    STATE.no_color = no_color


# Every command in `--help`'s order: name -> (module, attribute); a group's attribute is its
# Typer app. The modules are imported by build(), not here.
COMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("provisioner.cli.inventory", "validate"),
    "power": ("provisioner.cli.inventory", "power"),
    "catalog": ("provisioner.cli.inventory", "catalog"),
    "render": ("provisioner.cli.render", "render"),
    "run": ("provisioner.cli.run", "run"),
    "doctor": ("provisioner.cli.doctor", "doctor"),
    "up": ("provisioner.cli.up", "up"),
    "plan": ("provisioner.cli.up", "plan"),
    "status": ("provisioner.cli.up", "status"),
    "discover": ("provisioner.cli.discover", "discover"),
    "add": ("provisioner.cli.add", "add"),
    "report": ("provisioner.cli.report", "report"),
    "schema": ("provisioner.cli.report", "schema"),
    "bmc": ("provisioner.cli.bmc", "app"),
    "fabric": ("provisioner.cli.fabric", "app"),
    "lab": ("provisioner.cli.lab", "app"),
    "pxe": ("provisioner.cli.pxe", "app"),
    "upgrade": ("provisioner.cli.upgrade", "app"),
}
GROUPS = ("bmc", "fabric", "lab", "pxe", "upgrade")


def build(only: Sequence[str] | None = None) -> typer.Typer:
    """The app with every command, or with just the named ones (what a command line that
    names a command needs: its parser, help and errors are the same)."""
    app = typer.Typer(
        name="provision",
        help="Take racks of GPU servers from bare metal to a GPU Kubernetes cluster.",
        epilog="Exit codes: 0 ok, 1 internal error, 2 usage or config, 3 inventory, "
        "4 budget, 5 BMC, 6 render, 7 playbook, 8 state, 9 nodes failed in up or upgrade, "
        "10 fabric, 11 upgrade refused, 12 failure budget spent, 13 Kubernetes API, "
        "14 execution node, 130 interrupted.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_show_locals=False,  # locals may hold credentials
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    for name, (module, attr) in COMMANDS.items():
        if only is not None and name not in only:
            continue
        target = getattr(importlib.import_module(module), attr)
        if name in GROUPS:
            app.add_typer(target, name=name)
        else:
            app.command(name)(target)
    one_line_summaries(app)
    return app


def one_line_summaries(typer_app: typer.Typer) -> None:
    """Each command's entry in `--help`'s list: its docstring's first sentence as one line.
    Typer shows the first paragraph with the docstring's own line breaks, which leaves a
    ragged column at 80 columns."""
    for info in typer_app.registered_commands:
        doc = info.callback.__doc__ if info.callback is not None else None
        if info.short_help is None and info.help is None and doc:
            first = " ".join(doc.split("\n\n", 1)[0].split())
            info.short_help = first.split(". ", 1)[0].rstrip(".") + "."
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            one_line_summaries(group.typer_instance)


def named_command(argv: Sequence[str]) -> str | None:
    """The command a command line names (the first word that is no global option), when it
    is one of ours; None for none, a typo, or `--help` alone (the whole app then answers)."""
    for word in argv:
        if word.startswith("-"):
            continue
        return word if word in COMMANDS else None
    return None


def main() -> None:
    argv = sys.argv[1:]
    configure_logging(debug="--debug" in argv)  # before any command imports a library
    command = named_command(argv)
    build([command] if command is not None else None)()
