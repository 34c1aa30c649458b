"""provision bmc: power, boot and inventory across every node's BMC, in parallel.

Imported at `provision bmc`'s start, so it imports only the BMC layer's vocabulary: the
budget rule, the topology and the JSON shapes are imported where a command uses them, the
protocol libraries by make_driver (tests/unit/test_cli_startup.py)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from provisioner import bmc as bmc_mod
from provisioner.bmc import BootDevice, BootMode, NodeResult, PowerAction
from provisioner.cli.common import (
    JsonOpt,
    SiteArg,
    console,
    handle_errors,
    load_checked,
)
from provisioner.errors import ExitCode

if TYPE_CHECKING:
    from provisioner.inventory.loader import LoadedSite

app = typer.Typer(help="Talk to the nodes' BMCs (Redfish or IPMI): power, boot, inventory.",
                  no_args_is_help=True)

LimitOpt = Annotated[str | None, typer.Option(
    "--limit", "-l", help="Only these nodes: comma-separated globs, '!glob' excludes.")]
ConcurrencyOpt = Annotated[int, typer.Option(
    "--concurrency", min=1, max=4096, help="BMCs talked to at once.")]
TimeoutOpt = Annotated[float, typer.Option(
    "--timeout", min=1.0, help="Seconds one node may take before it is marked failed.")]
RequestTimeoutOpt = Annotated[float, typer.Option(
    "--request-timeout", min=0.5, help="Seconds for one BMC request.")]


def refused_by_budget(loaded: LoadedSite, nodes: Sequence[str]) -> dict[str, str]:
    """Nodes in a rack whose feeds or cooling cannot carry it -> why, by `up`'s own rule
    (steps.bmc.blocked_racks): such a node is never sent a power-on."""
    from provisioner.inventory.topology import host_plans
    from provisioner.workflows.steps.bmc import blocked_racks

    blocked = blocked_racks(loaded)
    rack_of = {h.hostname: h.placement.rack for h in host_plans(loaded)}
    return {n: f"not powered on: rack {rack_of[n]} is over budget "
               f"({blocked[rack_of[n]]})"
            for n in nodes if rack_of.get(n) in blocked}


def _run(operation: str, site: Any, limit: str | None, json_out: bool, concurrency: int,
         timeout_s: float, request_timeout_s: float, op: Callable[[Any], Any],
         budget_gate: bool = False,
         after: Callable[[LoadedSite, list[NodeResult[Any]]], None] | None = None) -> None:
    """`op` on every selected node's BMC. With `budget_gate` (power on, cycle), nodes in an
    over-budget rack are refused before any request. Exit 5 if a BMC operation failed, else
    4 if a node was refused for its rack's budget, else 0."""
    loaded = load_checked(site)
    targets = bmc_mod.targets(loaded, os.environ, limit, request_timeout_s=request_timeout_s)
    refused = refused_by_budget(loaded, [t.node for t in targets]) if budget_gate else {}
    allowed = [t for t in targets if t.node not in refused]
    out = console(json_out)
    with out.node_progress(operation, [t.node for t in allowed]) as progress:
        ran = bmc_mod.run_many(allowed, op, bmc_mod.make_driver, concurrency=concurrency,
                               node_timeout_s=timeout_s, progress=progress)
    by_node = {r.node: r for r in ran}
    results = [by_node.get(t.node) or NodeResult(t.node, ok=False, error=refused[t.node],
                                                 error_kind="BudgetError")
               for t in targets]
    failed = [r for r in ran if not r.ok]
    if after is not None:
        after(loaded, ran)
    if json_out:
        from provisioner import results as results_mod

        out.emit_json(results_mod.dump(results_mod.bmc_report(operation,
                                                              loaded.site.site.name, results)))
    else:
        out.bmc_results(operation, results)
    code = ExitCode.BMC if failed else ExitCode.BUDGET if refused else ExitCode.OK
    raise typer.Exit(int(code))


def _power(action: PowerAction, timeout_s: float) -> Callable[[Any], Any]:
    def op(driver: Any) -> str:
        return str(driver.set_power(action, timeout_s * 0.9).value)
    return op


class BootModeChoice(StrEnum):
    uefi = "uefi"
    legacy = "legacy"


@app.command()
@handle_errors
def status(site: SiteArg = None, limit: LimitOpt = None, json_out: JsonOpt = False,
           concurrency: ConcurrencyOpt = bmc_mod.DEFAULT_CONCURRENCY,
           timeout: TimeoutOpt = 60.0, request_timeout: RequestTimeoutOpt = 10.0) -> None:
    """Power state of every node."""
    _run("status", site, limit, json_out, concurrency, timeout, request_timeout,
         lambda d: str(d.get_power_state().value))


@app.command()
@handle_errors
def on(site: SiteArg = None, limit: LimitOpt = None, json_out: JsonOpt = False,
       concurrency: ConcurrencyOpt = bmc_mod.DEFAULT_CONCURRENCY,
       timeout: TimeoutOpt = 180.0, request_timeout: RequestTimeoutOpt = 10.0) -> None:
    """Power on and wait until every BMC reports on. Nodes in a rack over its power or
    cooling budget (`provision power`) are refused, as by `up` (exit 4)."""
    _run("on", site, limit, json_out, concurrency, timeout, request_timeout,
         _power(PowerAction.ON, timeout), budget_gate=True)


@app.command()
@handle_errors
def off(site: SiteArg = None, limit: LimitOpt = None, json_out: JsonOpt = False,
        soft: Annotated[bool, typer.Option(help="ACPI shutdown instead of a hard off.")] = False,
        concurrency: ConcurrencyOpt = bmc_mod.DEFAULT_CONCURRENCY,
        timeout: TimeoutOpt = 180.0, request_timeout: RequestTimeoutOpt = 10.0) -> None:
    """Power off (hard, or --soft) and wait until every BMC reports off."""
    _run("off", site, limit, json_out, concurrency, timeout, request_timeout,
         _power(PowerAction.SOFT_OFF if soft else PowerAction.OFF, timeout))


@app.command()
@handle_errors
def cycle(site: SiteArg = None, limit: LimitOpt = None, json_out: JsonOpt = False,
          concurrency: ConcurrencyOpt = bmc_mod.DEFAULT_CONCURRENCY,
          timeout: TimeoutOpt = 180.0, request_timeout: RequestTimeoutOpt = 10.0) -> None:
    """Power cycle (a node that is off is powered on) and wait until it reports on. Nodes in
    a rack over its power or cooling budget are refused, as by `up` (exit 4)."""
    _run("cycle", site, limit, json_out, concurrency, timeout, request_timeout,
         _power(PowerAction.CYCLE, timeout), budget_gate=True)


@app.command()
@handle_errors
def pxe(site: SiteArg = None, limit: LimitOpt = None, json_out: JsonOpt = False,
        persistent: Annotated[bool, typer.Option(help="Every boot, not only the next.")] = False,
        mode: Annotated[BootModeChoice, typer.Option(help="Firmware boot mode.")]
        = BootModeChoice.uefi,
        concurrency: ConcurrencyOpt = bmc_mod.DEFAULT_CONCURRENCY,
        timeout: TimeoutOpt = 60.0, request_timeout: RequestTimeoutOpt = 10.0) -> None:
    """Set network (PXE) boot for the next boot, and read it back."""
    boot_mode = BootMode(mode.value)
    _run("pxe", site, limit, json_out, concurrency, timeout, request_timeout,
         lambda d: d.set_boot_device(BootDevice.PXE, persistent=persistent, mode=boot_mode))


@app.command()
@handle_errors
def inventory(site: SiteArg = None, limit: LimitOpt = None, json_out: JsonOpt = False,
              concurrency: ConcurrencyOpt = bmc_mod.DEFAULT_CONCURRENCY,
              timeout: TimeoutOpt = 120.0, request_timeout: RequestTimeoutOpt = 10.0) -> None:
    """Hardware facts: vendor, model, serial, CPUs, memory, GPUs, NICs and MACs, PSUs,
    firmware versions (recorded for the nodes the state store knows)."""
    _run("inventory", site, limit, json_out, concurrency, timeout, request_timeout,
         lambda d: d.hardware_facts(), after=_record_firmware)


def _record_firmware(loaded: LoadedSite, ran: list[NodeResult[Any]]) -> None:
    """The firmware versions read, into an existing state store (none is made for them)."""
    from provisioner.profile import for_site
    from provisioner.state import StateStore
    from provisioner.workflows.steps.bmc import record_firmware

    path = for_site(loaded).state_path
    if path.exists():
        record_firmware(StateStore(path), {r.node: r.value for r in ran
                                           if r.ok and r.value is not None})


@app.command("power-draw")
@handle_errors
def power_draw(site: SiteArg = None, limit: LimitOpt = None, json_out: JsonOpt = False,
               concurrency: ConcurrencyOpt = bmc_mod.DEFAULT_CONCURRENCY,
               timeout: TimeoutOpt = 60.0, request_timeout: RequestTimeoutOpt = 10.0) -> None:
    """Present input power in W, where the BMC reports it (Redfish or DCMI)."""
    _run("power-draw", site, limit, json_out, concurrency, timeout, request_timeout,
         lambda d: d.power_reading_w())
