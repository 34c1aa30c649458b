"""provision pxe: network-boot configuration for the provisioning network."""

from __future__ import annotations

from collections.abc import Callable
from ipaddress import IPv4Address
from pathlib import Path
from typing import Annotated

import typer

from provisioner import boot
from provisioner.cli.common import (
    SiteArg,
    console,
    graceful_stop,
    handle_errors,
    load_checked,
)
from provisioner.errors import ConfigError
from provisioner.render import pxe as pxe_mod
from provisioner.render.autoinstall import release_for
from provisioner.state import StateStore, open_read_only
from provisioner.state.dir import state_dir
from provisioner.workflows.steps import intent
from provisioner.workflows.up import state_path

app = typer.Typer(help="Network boot (PXE/iPXE) and unattended OS install data.",
                  no_args_is_help=True)


OutOpt = Annotated[Path | None, typer.Option(
    "--out", "-o", help="Directory to write (replaced if it is a former PXE render). Default: "
    ".provision/pxe next to the site; for the embedded example of an installed provisioner, "
    "in the current directory.")]
ServerOpt = Annotated[str | None, typer.Option(
    "--server", help="This machine's address on the boot network (default: the network's "
    "gateway).")]
InterfaceOpt = Annotated[str | None, typer.Option(
    "--interface", help="Interface dnsmasq serves DHCP on (required: no default, the DHCP "
    "server is authoritative).", show_default=False)]
SshKeyOpt = Annotated[Path | None, typer.Option(
    "--ssh-key", help="Public key installed nodes accept, besides the site's "
    "ssh: authorized_keys.")]
IsoOpt = Annotated[Path | None, typer.Option(
    "--iso", help="Ubuntu live-server ISO of software.os's release: its casper/vmlinuz and "
    "casper/initrd are extracted and served with it (default: provisioning.iso_url on the "
    "site mirror, with casper/ unpacked beside it).")]
HttpPortOpt = Annotated[int, typer.Option("--http-port", min=1, max=65535,
                                          help="Port of the HTTP server for iPXE scripts.")]


def require_interface(interface: str | None) -> str:
    """The boot network's interface, which the user must name: the rendered dnsmasq is an
    authoritative DHCP server, and a guessed default (eth0) may be the site's uplink."""
    if not interface:
        raise ConfigError(
            "--interface is required: the rendered dnsmasq is an authoritative DHCP server "
            "and must answer only on the boot network's interface (there is no default such "
            "as eth0, which may be this machine's uplink)",
            hint="pass the interface on the boot network, for example --interface enp1s0")
    return interface


def _render(site: Path | None, out: Path | None, server: str | None, interface: str | None,
            ssh_key: Path | None, http_port: int, iso: Path | None = None
            ) -> tuple[Path, IPv4Address, dict[str, str], Path]:
    interface = require_interface(interface)
    loaded = load_checked(site)
    net = pxe_mod.provisioning_network(loaded)
    address = server or (str(net.gateway) if net.gateway else None)
    if address is None:
        raise ConfigError("no --server given and the boot network has no gateway",
                          hint="pass --server with this machine's address on it")
    key = ssh_key.read_text().strip() if ssh_key else ""
    target = out or state_dir(loaded.base_dir) / "pxe"
    con = console()
    media = None
    stage: Callable[[Path], None] | None = None
    if iso is not None:
        release = release_for(loaded.site.software.os)
        media = pxe_mod.served_media(f"http://{address}:{http_port}", release)

        def stage_installer(work: Path) -> None:  # into the render, before it is renamed
            info = boot.stage_iso(iso, work / "ubuntu" / release.codename, release.version)
            con.info(f"installer: {info} (kernel and initrd extracted from {iso})")
        stage = stage_installer
    written, missing = pxe_mod.render_pxe(
        loaded, target, server=IPv4Address(address), interface=interface, ssh_public_key=key,
        http_port=http_port, media=media, stage=stage,
        known_hosts=state_dir(loaded.base_dir) / "known_hosts")
    con.info(f"rendered {len(written)} files to {target} (boot network {net.name} {net.cidr}); "
             f"host keys of the nodes in {state_dir(loaded.base_dir) / 'known_hosts'}")
    if missing:
        con.info("not network-bootable (no MAC or address on that network): "
                 + ", ".join(missing))
    hosts, _ = pxe_mod.boot_hosts(loaded, net)
    return (target, IPv4Address(address), {h.hostname: str(h.address) for h in hosts},
            state_path(loaded))


@app.command("render")
@handle_errors
def render(site: SiteArg = None, out: OutOpt = None, server: ServerOpt = None,
           interface: InterfaceOpt = None, ssh_key: SshKeyOpt = None,
           http_port: HttpPortOpt = 8080, iso: IsoOpt = None) -> None:
    """Render dnsmasq.conf (DHCP by MAC, TFTP, iPXE), iPXE scripts and autoinstall data."""
    _render(site, out, server, interface, ssh_key, http_port, iso)


@app.command("serve")
@handle_errors
def serve(site: SiteArg = None, out: OutOpt = None, server: ServerOpt = None,
          interface: InterfaceOpt = None, ssh_key: SshKeyOpt = None,
          http_port: HttpPortOpt = 8080, iso: IsoOpt = None,
          dhcp: Annotated[bool, typer.Option(help="Run dnsmasq (DHCP + TFTP); --no-dhcp "
                                             "serves HTTP only, beside an existing DHCP.")]
          = True) -> None:
    """Render, then run dnsmasq and the HTTP server for the boot files until Ctrl-C."""
    root, address, owners, store_path = _render(site, out, server, interface, ssh_key,
                                                http_port, iso)
    con = console()

    def fill(host: str) -> dict[str, str]:  # the node's grant and token as of now
        store = open_read_only(store_path)
        return intent.served(store, host) if store else intent.served_nothing()

    def on_report(host: str, text: str) -> None:  # its installer's disk guard refused
        intent.record_report(StateStore(store_path), host, text)

    with graceful_stop("stopping the boot services") as done:
        running = boot.serve(root, address, http_port, dhcp=dhcp, log=con.info,
                             owners=owners, fill=fill, on_report=on_report)
        try:
            con.info(f"serving boot files at {running.url}/ipxe/ and "
                     f"{running.url}/autoinstall/"
                     + (f"; dnsmasq pid {running.dnsmasq.pid} on {interface} (log: "
                        f"{root / 'dnsmasq.log'})" if running.dnsmasq else "; DHCP not served"))
            if running.missing_loaders:
                con.info("TFTP has no " + " or ".join(running.missing_loaders) + ": firmware "
                         "without iPXE cannot boot (apt-get install ipxe, or copy them to "
                         f"{root / 'tftp'})")
            while not done.wait(0.5):
                if running.dnsmasq is not None and running.dnsmasq.poll() is not None:
                    raise ConfigError(f"dnsmasq exited ({running.dnsmasq.returncode})",
                                      hint=f"see {root / 'dnsmasq.log'}")
        finally:
            running.stop()
    con.info("stopped")
