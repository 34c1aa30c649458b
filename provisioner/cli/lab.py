"""provision lab: real BMC emulators on loopback for every node of a site."""

from __future__ import annotations

from typing import Annotated

import typer

from provisioner import lab as lab_mod
from provisioner import results
from provisioner.cli.common import (
    JsonOpt,
    SiteArg,
    console,
    handle_errors,
    load_checked,
    resolve_site,
)
from provisioner.errors import ExitCode
from provisioner.inventory import load
from provisioner.lab import orphans

app = typer.Typer(help="The local lab: sushy-tools Redfish and OpenIPMI ipmi_sim BMCs on "
                  "loopback, one per node of the site.", no_args_is_help=True)


@app.command()
@handle_errors
def up(site: SiteArg = None,
       latency_ms: Annotated[int, typer.Option(
           "--latency-ms", min=0, max=10_000,
           help="Delay every request to a BMC, as real BMCs are slow.")] = 0,
       ssh_hosts: Annotated[bool, typer.Option(
           "--ssh-hosts/--no-ssh-hosts", help="Also start an SSH test host per server "
           "(network namespace, sshd, copy-on-write Debian root; needs root; builds the "
           "image on first use), so the lab is a whole site for `provision up`.")]
       = True,
       json_out: JsonOpt = False) -> None:
    """Start an emulated BMC and an SSH test host for every node; point the inventory at
    them."""
    loaded = load_checked(site)
    state = lab_mod.up(loaded, latency_ms=latency_ms, ssh_hosts=ssh_hosts)
    out = console(json_out)
    if json_out:
        out.emit_json(results.dump(results.lab_report(state.site, state,
                                                      with_liveness=False)))
    else:
        out.lab_state(state, lab_mod.lab_dir(loaded))


@app.command()
@handle_errors
def down(site: SiteArg = None) -> None:
    """Stop exactly the processes `lab up` started (recorded PIDs), remove the overlay."""
    # Not load_checked: a lab must come down even after its site was edited into a state
    # validate refuses (it reads only the lab's own records beside the site).
    loaded = load(resolve_site(site))
    stopped = lab_mod.down(loaded)
    console().info(f"lab stopped: {len(stopped)} process(es) ended; overlay removed")


@app.command()
@handle_errors
def prune() -> None:
    """Remove what a killed lab left behind: lab namespaces with no process in them and
    their bridge (which keeps the site's gateway address and blocks the next `lab up`),
    and the hosts of a `lab up` that died before it finished (ended by PID first)."""
    gone = orphans.prune()
    for netns, why in gone.stranded.items():
        console().info(f"ended lab host {netns}: {why}")
    console().info(f"lab leftovers removed: {len(gone.namespaces)} namespace(s) "
                   f"{' '.join(gone.namespaces)}; {len(gone.bridges)} bridge(s) "
                   f"{' '.join(gone.bridges)}")
    if gone.busy:  # a running lab, or a killed lab's zebra: not ours to stop from here
        console().info(f"left alone (a process runs in them): {' '.join(gone.busy)}")


@app.command()
@handle_errors
def status(site: SiteArg = None, json_out: JsonOpt = False) -> None:
    """What the lab runs: processes, SSH hosts, execution nodes and switches (alive or
    not) and each node's endpoint.

    Exit 0 when all of it runs, 5 when some of it died (listed), 2 when no lab is up.
    """
    loaded = load_checked(site)
    state = lab_mod.status(loaded)
    out = console(json_out)
    if state is None:
        if json_out:
            out.emit_json(results.dump(results.lab_report(loaded.site.site.name, None,
                                                          with_liveness=True)))
        else:
            out.info("no lab is running for this site (`provision lab up` starts one)")
        raise typer.Exit(int(ExitCode.CONFIG))
    dead = state.dead()
    if json_out:
        out.emit_json(results.dump(results.lab_report(state.site, state, with_liveness=True)))
    else:
        out.lab_state(state, lab_mod.lab_dir(loaded))
        if dead:
            out.info(f"dead: {', '.join(dead)}")
    raise typer.Exit(int(ExitCode.BMC if dead else ExitCode.OK))


@app.command("add-unknown")
@handle_errors
def add_unknown(site: SiteArg = None,
                block: Annotated[str | None, typer.Option(
                    "--block", help="Catalog block the node is shaped like (default: the "
                    "site's first GPU server block).")] = None,
                json_out: JsonOpt = False) -> None:
    """Start one more emulated Redfish BMC that the inventory does not know (to try
    `provision discover` and `provision add`); `lab down` stops it with the rest."""
    from provisioner.lab import unknown

    loaded = load_checked(site)
    node = unknown.add_unknown(loaded, block)
    out = console(json_out)
    if json_out:
        out.emit_json(results.dump(results.lab_unknown_report(loaded.site.site.name, node)))
        return
    out.info(f"unknown node {node.name} ({node.block}): Redfish at "
             f"{node.scheme}://{node.address}:{node.port}, management MAC {node.mgmt_mac}")
    out.info(f"find it with: provision discover --range {node.address}/32 "
             f"--redfish-port {node.port} --scheme {node.scheme}")
