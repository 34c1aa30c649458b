"""provision pxe: network-boot configuration for the provisioning network."""

from __future__ import annotations

from ipaddress import IPv4Address
from pathlib import Path
from typing import Annotated

import typer

from provisioner.cli.common import SiteArg, console, handle_errors, resolve_site
from provisioner.errors import ConfigError
from provisioner.inventory import load
from provisioner.render import pxe as pxe_mod

app = typer.Typer(help="Network boot (PXE/iPXE) and unattended OS install data.",
                  no_args_is_help=True)


@app.command("render")
@handle_errors
def render(site: SiteArg = None,
           out: Annotated[Path | None, typer.Option("--out", "-o", help="Directory to write. "
                                                    "Default: .provision/pxe next to the site.")]
           = None,
           server: Annotated[str | None, typer.Option(
               "--server", help="This machine's address on the boot network (default: the "
               "network's gateway).")] = None,
           interface: Annotated[str, typer.Option(help="Interface dnsmasq serves on.")]
           = "eth0",
           ssh_key: Annotated[Path | None, typer.Option(
               "--ssh-key", help="Public key installed nodes accept (the tool's).")] = None,
           ) -> None:
    """Render dnsmasq.conf (DHCP by MAC, TFTP, iPXE), iPXE scripts and autoinstall data."""
    loaded = load(resolve_site(site))
    net = pxe_mod.provisioning_network(loaded)
    address = server or (str(net.gateway) if net.gateway else None)
    if address is None:
        raise ConfigError("no --server given and the boot network has no gateway",
                          hint="pass --server with this machine's address on it")
    key = ssh_key.read_text().strip() if ssh_key else ""
    target = out or loaded.base_dir / ".provision" / "pxe"
    written, missing = pxe_mod.render_pxe(loaded, target, server=IPv4Address(address),
                                          interface=interface, ssh_public_key=key)
    con = console()
    con.info(f"rendered {len(written)} files to {target} (boot network {net.name} {net.cidr})")
    if missing:
        con.info("not network-bootable (no MAC or address on that network): "
                 + ", ".join(missing))
