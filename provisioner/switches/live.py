"""`fabric check --live`, the gathering: each switch's running config over its driver (the
same netmiko edge as diff/push), each host's link MTU (/sys/class/net/<nic>/mtu) and
`mlnx_qos -i <nic>` over SSH with the site's login (workflows/steps/guard.py: same key, same
host-key policy), then fabric/live.py. The MTU is the host's own, read whether or not
mlnx_qos is there: a RoCE NIC left at 1500 against a 9216 port is the commonest fault.

Read-only: nothing is sent to a switch but its `show` command. Switches and hosts are read
on the engine's fan-out; one that cannot be read is reported, the others go on.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv6Address

import paramiko  # type: ignore[import-untyped]  # no stubs; a netmiko dependency

from provisioner import fabric, hostnet, roce
from provisioner.credentials import CredentialResolver
from provisioner.errors import ProvisionerError
from provisioner.fabric.base import Mismatch, SwitchQos
from provisioner.fabric.live import HostQos, Unverifiable, compare_live, parse_mlnx_qos
from provisioner.fanout import fan_out
from provisioner.inventory.cabling import Endpoint, endpoints, resolve, roce_networks
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import Node, Site
from provisioner.profile import Profile
from provisioner.render import ansible_host
from provisioner.ssh import Login, connect, login_for
from provisioner.switches import ops, staged, standins

QOS_OSES = ("cumulus", "onyx", "sonic", "eos")  # the ones whose config carries RoCE QoS


@dataclass(frozen=True, slots=True)
class LiveReport:
    links_checked: int
    mismatches: tuple[Mismatch, ...]
    unverifiable: tuple[Unverifiable, ...]
    notes: tuple[str, ...] = ()  # the lab: what a stand-in switch could not show

    @property
    def ok(self) -> bool:
        return not self.mismatches


def run(loaded: LoadedSite, env: Mapping[str, str], prof: Profile,
        connect: ops.DriverFactory = ops.netmiko_factory, timeout_s: float = 20.0
        ) -> LiveReport:
    ops.refuse_inventory_errors(loaded)
    links = list(resolve(loaded.site, loaded.catalog))
    specs = {s.hostname: s for s in fabric.switch_specs(loaded)}
    switches = sorted({lk.switch for lk in links if lk.switch in specs})
    logins = CredentialResolver(loaded, env)

    def read_switch(name: str) -> SwitchQos | str:
        nos = specs[name].nos
        stand_in = prof.stand_ins.get(name)
        if stand_in:
            return (f"lab stand-in speaking {stand_in} for a {nos} switch: it carries no "
                    "RoCE QoS")
        if nos not in QOS_OSES:
            return f"{nos} configs carry no RoCE QoS"
        try:
            drv = connect(ops.endpoint(loaded, name, logins, timeout_s, prof.stand_ins))
        except ProvisionerError as exc:
            return str(exc)
        try:
            if isinstance(drv, staged.Shell):
                rc, text = drv.run(staged.FLAVORS[nos].show)
                if rc != 0:
                    return f"`{staged.FLAVORS[nos].show}` failed"
            else:
                text = drv.running_config()
            return fabric.RENDERERS[nos].parse(text)
        except (ProvisionerError, ValueError) as exc:
            return f"cannot read its config: {exc}"
        finally:
            drv.close()

    login = login_for(loaded, prof)
    eps = endpoints(loaded.site, loaded.catalog)

    def read_host(key: str) -> HostRead | str:
        host, nic = key.split(" ", 1)
        address = ansible_host(eps[host].node) if host in eps else None
        if address is None:
            return "no management address"
        return _read_host(address, login, host, host_ifname(loaded.site, eps[host].node, nic),
                          timeout_s)

    host_keys = sorted({f"{lk.node} {lk.nic}" for lk in links if lk.switch in specs})
    sw = {d.key: d.value if d.value is not None else f"no answer ({d.error or 'timeout'})"
          for d in fan_out(switches, read_switch, concurrency=8, deadline_s=timeout_s * 4)}
    hq = {d.key: d.value if d.value is not None else f"no answer ({d.error or 'timeout'})"
          for d in fan_out(host_keys, read_host, concurrency=8, deadline_s=timeout_s * 4)}
    policy = roce.policy(loaded.site.software.roce)
    found: list[Mismatch] = []
    unknown = [Unverifiable("switch", k, v) for k, v in sw.items() if isinstance(v, str)]
    for k, v in hq.items():
        why = v if isinstance(v, str) else v.qos if isinstance(v.qos, str) else None
        if why is not None:
            unknown.append(Unverifiable("host", k, why))
    count = 0
    rocenets = roce_networks(loaded.site)
    nets = {n.name: n for n in loaded.site.networks}
    for lk in links:
        s, h = sw.get(lk.switch), hq.get(f"{lk.node} {lk.nic}")
        qos = s if isinstance(s, SwitchQos) else None
        if qos is not None:  # the port's VLAN as the switch has it, whatever the host says
            found += fabric.vlan_mismatches(lk.node, lk.nic, fabric.link_vlan(nets, lk),
                                            lk.switch, lk.switch_port, qos)
        if not isinstance(h, HostRead):
            continue
        compared = qos is not None and isinstance(h.qos, HostQos)
        found += mtu_mismatches(lk.node, lk.nic, h.mtu_bytes, lk.host_mtu_bytes, lk.switch,
                                lk.switch_port, lk.switch_mtu_bytes, qos,
                                against_port=not compared)
        found += gid_mismatches(lk.node, lk.nic, _roce_address(eps, rocenets, lk.node, lk.nic),
                                h, lk.switch, lk.switch_port)
        if qos is not None and isinstance(h.qos, HostQos):
            count += 1  # the host's own MTU against the port: base.compare, as for QoS
            found += compare_live(policy, lk.node, lk.nic, h.mtu_bytes, h.qos, lk.switch,
                                  lk.switch_port, qos)
    return LiveReport(count, tuple(found), tuple(unknown),
                      tuple(standins.notes(loaded, switches, prof, live=True)))


def host_ifname(site: Site, node: Node, nic: str) -> str:
    """The interface the host network role gives the link's network on the host (its VLAN
    sub-interface where tagged, the name the inventory sets), else the NIC as named."""
    return next((h.name for h in hostnet.plan(site, node) if h.network == nic), nic)


def _roce_address(eps: Mapping[str, Endpoint], rocenets: Mapping[str, int], host: str,
                  nic: str) -> str | None:
    """The NIC's address in the inventory: on the network the NIC is named after, else the
    node's one RoCE address (a site that names its RoCE interfaces); None when unsure."""
    ep = eps.get(host)
    if ep is None:
        return None
    if nic in ep.node.addresses:
        return str(ep.node.addresses[nic])
    mine = [a for net, a in ep.node.addresses.items() if net in rocenets]
    return str(mine[0]) if len(mine) == 1 else None


@dataclass(frozen=True, slots=True)
class HostRead:
    """One host NIC as read: its link MTU, its QoS or why that could not be read, the RDMA
    devices behind it and their GIDs as (GID, type: "RoCE v2", "IB/RoCE v1")."""

    mtu_bytes: int
    qos: HostQos | str
    rdma_devices: tuple[str, ...] = ()
    gids: tuple[tuple[str, str], ...] = ()


NO_NIC = 3  # the script's exit status when the interface does not exist


def host_script(nic: str) -> str:
    """The MTU first (sysfs, every Linux), the RDMA devices whose GIDs sit on the NIC and
    those GIDs with their types, then mlnx_qos where it is installed. A GID's netdev is
    `gid_attrs/ndevs/<i>` (sysfs): found that way, not through the NIC's PCI device, an
    RDMA device on a bond (RoCE LAG) or a soft-RoCE one (rdma_rxe) is found too; an unused
    GID's type does not read."""
    q = shlex.quote(nic)
    # `read`, a shell builtin, not `$(cat ...)`: a port has hundreds of GID entries (soft-
    # RoCE over a thousand), and a fork each took 45 s in the lab's emulated guest
    return (f"cat /sys/class/net/{q}/mtu 2>/dev/null || exit {NO_NIC}; "
            'for p in /sys/class/infiniband/*/ports/*; do [ -d "$p/gid_attrs/ndevs" ] || '
            'continue; d=${p%/ports/*}; for n in "$p"/gid_attrs/ndevs/*; do v=; '
            '{ read -r v < "$n"; } 2>/dev/null; '
            f'[ "$v" = {q} ] || continue; i=${{n##*/}}; t=; '
            '{ read -r t < "$p/gid_attrs/types/$i"; } 2>/dev/null; [ -n "$t" ] || continue; '
            'g=; read -r g < "$p/gids/$i"; echo "rdma ${d##*/}"; echo "gid $g $t"; done; done; '
            f"command -v mlnx_qos >/dev/null || exit 127; mlnx_qos -i {q}")


def parse_host_read(host: str, nic: str, text: str, code: int) -> HostRead | str:
    """What host_script printed and its exit status, as a HostRead or why not."""
    if code == NO_NIC:
        return f"{host} has no interface {nic} (/sys/class/net/{nic})"
    first, _, rest = text.partition("\n")
    if not first.strip().isdigit():
        return f"{host} {nic}: no MTU in /sys/class/net/{nic}/mtu"
    mtu = int(first.strip())
    devices: list[str] = []
    gids: list[tuple[str, str]] = []
    qos_lines: list[str] = []
    for line in rest.splitlines():
        if line.startswith("rdma "):
            if line[5:].strip() not in devices:
                devices.append(line[5:].strip())
        elif line.startswith("gid "):
            gid, _, kind = line[4:].strip().partition(" ")
            gids.append((gid, kind.strip()))
        else:
            qos_lines.append(line)
    qos: HostQos | str
    if code == 127:
        qos = "mlnx_qos is not installed (no MLNX_OFED/DOCA tools): QoS not verifiable"
    elif code != 0:
        qos = f"`mlnx_qos -i {nic}` failed (exit {code})"
    else:
        try:
            qos = parse_mlnx_qos("\n".join(qos_lines))
        except ValueError as exc:
            qos = str(exc)
    return HostRead(mtu, qos, tuple(devices), tuple(gids))


def gid_mismatches(host: str, nic: str, address: str | None, read: HostRead, switch: str,
                   port: str) -> list[Mismatch]:
    """The RoCE v2 GID of the NIC's own IPv4 address (IPv4-mapped, ::ffff:a.b.c.d): without
    it RDMA-CM cannot resolve the address and NCCL falls back to a link-local GID that does
    not cross an L3 leaf. Said where an RDMA device is behind the NIC and the inventory
    gives its address."""
    if address is None or not read.rdma_devices:
        return []
    want = IPv6Address(f"::ffff:{address}")
    have = []
    for gid, kind in read.gids:
        try:
            parsed = IPv6Address(gid)
        except ValueError:
            continue
        if parsed == want and kind == "RoCE v2":
            return []
        if parsed.ipv4_mapped is not None:
            have.append(f"{parsed.ipv4_mapped} ({kind})")
    return [Mismatch(host, nic, switch, port, "gid",
                     f"no RoCE v2 GID for {address} on {', '.join(read.rdma_devices)} "
                     f"(IPv4 GIDs: {', '.join(have) or 'none'})",
                     "RDMA-CM and NCCL need it: set the address on the RoCE NIC")]


def mtu_mismatches(host: str, nic: str, host_mtu_bytes: int, declared_mtu_bytes: int,
                   switch: str, port: str, inventory_port_mtu_bytes: int,
                   qos: SwitchQos | None, *, against_port: bool = True) -> list[Mismatch]:
    """The host's own MTU against what the inventory declares (RDMA's active MTU follows
    the smaller end, so a host left at 1500 runs RoCE at 1024) and, `against_port`, against
    the switch port's (read back where the switch could be read, else the inventory's, said
    so); without it base.compare judges the port, where both ends' QoS was read."""
    read = qos.port_mtu_bytes.get(port) if qos is not None else None
    port_mtu = read if read is not None else inventory_port_mtu_bytes
    where = "" if read is not None else " (inventory; not read from the switch)"
    found = []
    if against_port and host_mtu_bytes > port_mtu:
        found.append(Mismatch(host, nic, switch, port, "mtu", f"{host_mtu_bytes} (read)",
                              f"{port_mtu}{where}: frames above it are dropped"))
    if host_mtu_bytes < declared_mtu_bytes:
        found.append(Mismatch(host, nic, switch, port, "mtu",
                              f"{host_mtu_bytes} (read; the inventory declares "
                              f"{declared_mtu_bytes})", f"{port_mtu}{where}"))
    return found


def _read_host(address: str, login: Login, host: str, nic: str,
               timeout_s: float) -> HostRead | str:
    client = paramiko.SSHClient()
    try:
        connect(client, address, login, timeout_s)  # the site's known_hosts, as the guard
        _, stdout, _ = client.exec_command(host_script(nic), timeout=timeout_s)
        text = stdout.read(65536).decode(errors="replace")
        code = stdout.channel.recv_exit_status()
    except (paramiko.SSHException, OSError, EOFError) as exc:
        return f"cannot log in on {address} ({type(exc).__name__}: {str(exc)[:120]})"
    finally:
        client.close()
    return parse_host_read(host, nic, text, code)
