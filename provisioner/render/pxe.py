"""Network-boot configuration for the provisioning network: dnsmasq (DHCP reservations by
MAC, TFTP for the iPXE loader), one iPXE script per node, and Ubuntu autoinstall data
(cloud-init NoCloud) with the node's host name, disk layout, the tool's SSH key and the
site mirror. Rendered only; `dnsmasq --test` checks the result. Secret-free: the SSH key is
a public key, no password is set for any user.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

import jinja2
import yaml

from provisioner.errors import RenderError
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import HOSTNAME_RE, MAC_RE, Network, NetworkKind
from provisioner.inventory.topology import servers
from provisioner.render import TEMPLATES_DIR

PUBLIC_KEY_RE = re.compile(
    r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,3}( [\w.@+-]*)?$")


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


def render_pxe(loaded: LoadedSite, out: Path, *, server: IPv4Address, http_port: int = 8080,
               interface: str = "eth0", ssh_public_key: str = "",
               ubuntu_release: str = "jammy") -> tuple[list[Path], list[str]]:
    """Write dnsmasq.conf, ipxe/<host>.ipxe and autoinstall/<host>/{user-data,meta-data}.

    Returns the files written and the servers left out (no MAC or address on the network).
    """
    net = provisioning_network(loaded)
    hosts, missing = boot_hosts(loaded, net)
    if server not in net.cidr:
        raise RenderError(f"PXE server {server} is outside {net.name} {net.cidr}")
    if ssh_public_key and not PUBLIC_KEY_RE.match(ssh_public_key):
        raise RenderError("the SSH key for installed nodes must be one OpenSSH public key line")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR / "pxe")),
                             undefined=jinja2.StrictUndefined, autoescape=False,  # noqa: S701
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    base = f"http://{server}:{http_port}"
    context = {"site": loaded.site.site.name, "network": net, "hosts": hosts,
               "server": server, "base": base, "interface": interface, "out": out.resolve(),
               "mirror": loaded.site.software.mirror or "", "release": ubuntu_release}
    written: list[Path] = []

    def write(rel: str, text: str) -> None:
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)

    write("dnsmasq.conf", env.get_template("dnsmasq.conf.j2").render(**context))
    for h in hosts:
        write(f"ipxe/{h.hostname}.ipxe",
              env.get_template("host.ipxe.j2").render(host=h, **context))
        user = loaded.site.site.ssh.user
        keys = [ssh_public_key] if ssh_public_key else []
        # Key-only logins: cloud-init user-data instead of `identity` (which needs a crypted
        # password); root's key, when the tool logs in as root, by a late command.
        cloud: dict[str, object] = {"hostname": h.hostname}
        late = [f"echo {h.hostname} > /target/etc/provisioner-installed"]
        if user == "root":
            cloud["disable_root"] = False
            late += ["mkdir -p -m 700 /target/root/.ssh"] + [
                f"echo '{k}' >> /target/root/.ssh/authorized_keys" for k in keys]
        else:
            cloud["users"] = [{"name": user, "lock_passwd": True, "shell": "/bin/bash",
                               "sudo": "ALL=(ALL) NOPASSWD:ALL", "ssh_authorized_keys": keys}]
        user_data = {
            "autoinstall": {
                "version": 1,
                "user-data": cloud,
                "ssh": {"install-server": True, "allow-pw": False},
                "storage": {"layout": {"name": "lvm"}},
                "network": {"version": 2, "ethernets": {"boot": {
                    "match": {"macaddress": h.mac}, "set-name": "boot",
                    "addresses": [f"{h.address}/{net.cidr.prefixlen}"],
                    **({"routes": [{"to": "default", "via": str(net.gateway)}]}
                       if net.gateway else {})}}},
                **({"apt": {"primary": [{"arches": ["default"], "uri": context["mirror"]}],
                            "fallback": "abort"}} if context["mirror"] else {}),
                "late-commands": late,
            }
        }
        write(f"autoinstall/{h.hostname}/user-data",
              "#cloud-config\n" + yaml.safe_dump(user_data, sort_keys=True))
        write(f"autoinstall/{h.hostname}/meta-data", f"instance-id: {h.hostname}\n")
    return written, missing
