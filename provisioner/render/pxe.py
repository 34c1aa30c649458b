"""Network-boot configuration for the provisioning network: dnsmasq (DHCP reservations by
MAC, TFTP for the iPXE loader), one iPXE script per node (the installer kernel and initrd
of the release software.os names, `url=` the live-server ISO), and Ubuntu autoinstall data
(cloud-init NoCloud; render/autoinstall.py) with the node's host name, OS disk rule, the
site's SSH public keys, its own SSH host key and the site mirror. `dnsmasq --test` checks
the result. No password is set for any user; the only secrets are the nodes' private host
keys, written 0600 (hostkeys/, autoinstall/<host>/user-data) and served by `pxe serve` only
to the node's own address.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

import jinja2
import yaml

from provisioner import install, outdir, resources
from provisioner.errors import RenderError
from provisioner.inventory.fields import PUBLIC_KEY_RE as _PUBLIC_KEY
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import HOSTNAME_RE, MAC_RE, Network, NetworkKind
from provisioner.inventory.topology import servers
from provisioner.render import autoinstall
from provisioner.secrets import write_private

PUBLIC_KEY_RE = re.compile(_PUBLIC_KEY)


@dataclass(frozen=True)
class BootHost:
    hostname: str
    mac: str
    address: IPv4Address


def provisioning_network(loaded: LoadedSite) -> Network:
    """The network nodes boot from: kind provisioning, else kind management."""
    for kind in (NetworkKind.PROVISIONING, NetworkKind.MANAGEMENT):
        for net in loaded.site.networks:
            if net.kind is kind:
                return net
    raise RenderError("no provisioning or management network to boot from",
                      hint="add a network of kind provisioning (or management)")


def _management_nics(loaded: LoadedSite, boot: Network
                     ) -> dict[str, tuple[str, str, str | None]]:
    """Hostname -> (MAC, address/prefix, gateway) of its management NIC, for the nodes that
    boot from another network (kind provisioning) and have a management address; none when
    they boot from the management network. Without a management MAC, the boot NIC's."""
    mgmt = next((n for n in loaded.site.networks if n.kind is NetworkKind.MANAGEMENT), None)
    if mgmt is None or mgmt.name == boot.name:
        return {}
    gateway = str(mgmt.gateway) if mgmt.gateway else None
    out = {}
    for h in servers(loaded):
        address = h.node.addresses.get(mgmt.name)
        mac = h.node.macs.get(mgmt.name) or h.node.macs.get(boot.name)
        if address is not None and mac is not None:
            out[h.hostname] = (mac, f"{address}/{mgmt.cidr.prefixlen}", gateway)
    return out


def boot_hosts(loaded: LoadedSite, net: Network) -> tuple[list[BootHost], list[str]]:
    """Servers with a MAC and an address on the boot network; and those that lack one."""
    hosts, missing = [], []
    for h in servers(loaded):
        node = h.node
        mac, addr = node.macs.get(net.name), node.addresses.get(net.name)
        if mac is None or addr is None:
            missing.append(node.hostname)
            continue
        if not HOSTNAME_RE.match(node.hostname) or not MAC_RE.match(mac):
            raise RenderError(f"refusing to render boot data for {node.hostname!r}")
        hosts.append(BootHost(node.hostname, mac, addr))
    return sorted(hosts, key=lambda h: h.hostname), sorted(missing)


@dataclass(frozen=True)
class InstallMedia:
    """Where a node's iPXE script fetches the installer kernel and initrd, and the ISO URL
    the installer (casper) downloads and boots from (`url=` on the kernel command line)."""

    kernel_url: str
    initrd_url: str
    iso_url: str
    source: str  # one line for the operator: where they come from


def served_media(base: str, release: autoinstall.Release) -> InstallMedia:
    """The files `pxe serve --iso` extracted and serves itself (boot.stage_iso)."""
    root = f"{base}/ubuntu/{release.codename}"
    return InstallMedia(f"{root}/vmlinuz", f"{root}/initrd", f"{root}/installer.iso",
                        f"the --iso ISO (kernel and initrd extracted), served at {root}/")


def mirror_media(loaded: LoadedSite) -> InstallMedia:
    """From the site mirror: provisioning.iso_url is the live-server ISO there, and the
    mirror serves that ISO's casper/vmlinuz and casper/initrd beside it (the layout of the
    ISO unpacked next to the file)."""
    iso_url = loaded.site.provisioning.iso_url
    if not iso_url:
        raise RenderError("no installer to boot: name the Ubuntu live-server ISO with --iso "
                          "PATH, or set provisioning.iso_url (the ISO on the site mirror, with "
                          "its casper/ directory unpacked beside it)",
                          hint="for example: provision pxe serve --iso "
                          "ubuntu-22.04.5-live-server-amd64.iso --interface enp1s0")
    root = iso_url.rsplit("/", 1)[0]
    return InstallMedia(f"{root}/casper/vmlinuz", f"{root}/casper/initrd", iso_url,
                        f"the site mirror ({root}/)")


def _known_hosts_line(h: BootHost, key: autoinstall.HostKey) -> str:
    return f"{h.hostname},{h.address} {key.public.rsplit(' ', 1)[0]}"


def write_known_hosts(path: Path, lines: dict[str, str]) -> None:
    """Merge `lines` (host -> known_hosts line) into path: a host's old line is replaced."""
    kept = []
    if path.is_file():
        kept = [ln for ln in path.read_text().splitlines()
                if ln.split(",", 1)[0].split(" ", 1)[0] not in lines]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([*kept, *(lines[h] for h in sorted(lines))]) + "\n")


# a former render's: the nodes' host keys and their known_hosts lines, the iPXE loaders
KEPT = ("hostkeys", "known_hosts", "tftp")


def _former(out: Path) -> bool:
    """A former PXE render: its marker, or (rendered before the marker) its dnsmasq.conf."""
    conf = out / "dnsmasq.conf"
    return outdir.is_output(out) or (
        conf.is_file() and conf.read_text(errors="replace").startswith("# Rendered by provisioner"))


def render_pxe(loaded: LoadedSite, out: Path, *, server: IPv4Address, http_port: int = 8080,
               interface: str = "eth0", ssh_public_key: str = "",
               media: InstallMedia | None = None, known_hosts: Path | None = None,
               stage: Callable[[Path], object] | None = None) -> tuple[list[Path], list[str]]:
    """Write dnsmasq.conf, ipxe/<host>.ipxe and autoinstall/<host>/{user-data,meta-data}
    (user-data 0600: it carries the node's private host key), the nodes' host keys under
    hostkeys/ (0600) and known_hosts (also merged into `known_hosts` when given).

    `out` is replaced (it must be empty or a former PXE render): the files are written
    beside it and renamed onto it at the end (outdir.replace), so a render refused half-way
    leaves it as it was. A former render's KEPT directories go on into the new one (a host
    key, once installed on a node, never changes); `stage` fills the rest before the rename
    (`pxe serve --iso` stages the installer there).

    Returns the files written and the servers left out (no MAC or address on the network).
    """
    net = provisioning_network(loaded)
    hosts, missing = boot_hosts(loaded, net)
    if server not in net.cidr:
        raise RenderError(f"PXE server {server} is outside {net.name} {net.cidr}")
    if ssh_public_key and not PUBLIC_KEY_RE.match(ssh_public_key):
        raise RenderError("the SSH key for installed nodes must be one OpenSSH public key line")
    keys = list(dict.fromkeys([*loaded.site.site.ssh.authorized_keys,
                               *([ssh_public_key] if ssh_public_key else [])]))
    release = autoinstall.release_for(loaded.site.software.os)
    base = f"http://{server}:{http_port}"
    media = media or mirror_media(loaded)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(resources.templates_dir("pxe")),
                             undefined=jinja2.StrictUndefined, autoescape=False,  # noqa: S701
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    # the paths dnsmasq.conf names are the final ones, not the directory written first
    context = {"site": loaded.site.site.name, "network": net, "hosts": hosts,
               "server": server, "base": base, "interface": interface,
               "out": out.parent.resolve() / out.name, "release": release, "media": media,
               "dns_servers": [str(a) for a in loaded.site.software.sources.dns_servers],
               "dns_search": list(loaded.site.software.sources.dns_search)}
    blocks = {s.hostname: s.block for s in servers(loaded)}
    mgmt_nics = _management_nics(loaded, net)
    src = loaded.site.software.sources
    dns = tuple(str(a) for a in src.dns_servers)
    known: dict[str, str] = {}

    def fill(work: Path) -> list[Path]:
        written: list[Path] = []

        def write(rel: str, text: str, private: bool = False) -> None:
            path = work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if private:
                write_private(path, text)
            else:
                path.write_text(text)
            written.append(path)

        for name in KEPT:
            if (out / name).is_dir():
                shutil.copytree(out / name, work / name, symlinks=True)
            elif (out / name).is_file():
                shutil.copy2(out / name, work / name)
        write(outdir.MARKER, "rendered by provisioner (pxe render)\n")
        write("dnsmasq.conf", env.get_template("dnsmasq.conf.j2").render(**context))
        for h in hosts:
            write(f"ipxe/{h.hostname}.ipxe",
                  env.get_template("host.ipxe.j2").render(host=h, **context))
            key = autoinstall.host_key(work / "hostkeys", h.hostname)
            known[h.hostname] = _known_hosts_line(h, key)
            node = autoinstall.NodeInstall(
                hostname=h.hostname, mac=h.mac, address=f"{h.address}/{net.cidr.prefixlen}",
                gateway=str(net.gateway) if net.gateway else None, block=blocks[h.hostname],
                nameservers=dns, search=tuple(src.dns_search),
                mgmt=mgmt_nics.get(h.hostname))
            doc = autoinstall.user_data(node, user=loaded.site.site.ssh.user, keys=keys,
                                        key=key, mirror=loaded.site.software.mirror or "",
                                        callback_url=f"{base}{install.CALLBACK}{h.hostname}")
            write(f"autoinstall/{h.hostname}/user-data",
                  "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=True), private=True)
            write(f"autoinstall/{h.hostname}/meta-data", f"instance-id: {h.hostname}\n")
        write_known_hosts(work / "known_hosts", known)
        written.append(work / "known_hosts")
        if stage is not None:
            stage(work)
        return [out / p.relative_to(work) for p in written]

    written = outdir.replace(out, fill, former=_former)
    if known_hosts is not None:
        write_known_hosts(known_hosts, known)
    return written, missing
