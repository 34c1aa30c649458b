"""The `provision` command: a thin Typer layer over the core (parse -> core -> console)."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

import provisioner.cli.report as report_cli
from provisioner import __version__
from provisioner.cli import bmc, fabric, inventory, lab, pxe, up, upgrade
from provisioner.cli.add import add
from provisioner.cli.common import STATE
from provisioner.cli.discover import discover
from provisioner.cli.doctor import doctor
from provisioner.cli.render import render
from provisioner.cli.run import run
from provisioner.errors import redact

app = typer.Typer(
    name="provision",
    help="Take racks of GPU servers from bare metal to a GPU Kubernetes cluster.",
    epilog="Exit codes: 0 ok, 1 internal error, 2 usage or config, 3 inventory, 4 budget, "
    "5 BMC, 6 render, 7 playbook, 8 state, 9 nodes failed in up or upgrade, 10 fabric, "
    "11 upgrade refused, 12 failure budget spent, 13 Kubernetes API, 14 execution node, "
    "130 interrupted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold credentials
    context_settings={"help_option_names": ["-h", "--help"]},
)


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


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help="Plain output.")] = False,
) -> None:
    """Global options."""
    configure_logging(debug)
    STATE.debug = debug
    STATE.no_color = no_color


app.command()(inventory.validate)
app.command()(inventory.power)
app.command()(inventory.catalog)
app.command()(render)
app.command()(run)
app.command()(doctor)
app.command()(up.up)
app.command()(up.plan)
app.command()(up.status)
app.command()(discover)
app.command()(add)
app.add_typer(bmc.app, name="bmc")
app.add_typer(fabric.app, name="fabric")
app.add_typer(lab.app, name="lab")
app.add_typer(pxe.app, name="pxe")
app.add_typer(upgrade.app, name="upgrade")
report_cli.register(app)


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


one_line_summaries(app)


def main() -> None:
    configure_logging(debug="--debug" in sys.argv[1:])  # before any command imports a library
    app()
