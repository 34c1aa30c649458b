"""`provision lab add-unknown`: one more emulated Redfish BMC that the inventory does not
know, shaped like a catalog block, to try discovery against.

It is a real sushy-tools emulator (one system) behind the Redfish shape layer, with the
lab's BMC login, so the site's lab credentials open it. Its processes join the lab's
records (`lab down` stops them); its endpoint is in `.provision/lab/unknown.json`.
"""

from __future__ import annotations

import hashlib
import json
import socket
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from provisioner.errors import ConfigError
from provisioner.inventory import topology
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import BlockKind
from provisioner.lab import emulators, procs, redfish_shape, rootfs, shapes, wheelhouse
from provisioner.lab import hosts as hosts_mod
from provisioner.lab import mirror as mirror_mod


@dataclass(frozen=True)
class UnknownNode:
    name: str  # the lab's own label (the system name), not an inventory host name
    block: str
    address: str
    port: int
    scheme: str
    system_id: str
    mgmt_mac: str
    serial: str


def _registry(lab: Path) -> Path:
    return lab / "unknown.json"


def started(loaded: LoadedSite) -> list[UnknownNode]:
    """The unknown nodes the running lab serves."""
    from provisioner import lab as lab_mod

    path = _registry(lab_mod.lab_dir(loaded))
    if not path.exists():
        return []
    return [UnknownNode(**u) for u in json.loads(path.read_text())]


def default_block(loaded: LoadedSite) -> str:
    """The block of the site's first GPU server (what a site most often grows by)."""
    plans = [h for h in topology.servers(loaded) if h.node.bmc is not None]
    gpu = [h for h in plans if h.block.kind is BlockKind.GPU_SERVER]
    if not (gpu or plans):
        raise ConfigError("lab add-unknown: the site has no server to copy a shape from",
                          hint="name one with --block")
    return (gpu or plans)[0].block.name


def add_unknown(loaded: LoadedSite, block: str | None = None,
                timeout_s: float = 30.0) -> UnknownNode:
    """Start one unknown Redfish node shaped like `block` in the running lab."""
    from provisioner import lab as lab_mod

    state = lab_mod.status(loaded)
    if state is None or not any(p.alive() for p in state.processes):
        raise ConfigError("lab add-unknown: the lab is not running",
                          hint="`provision lab up` first")
    name = block or default_block(loaded)
    block_type = loaded.catalog.get(name)
    if block_type is None:
        raise ConfigError(f"lab add-unknown: no block {name!r} in the catalog",
                          hint="`provision catalog` lists them")
    if block_type.kind is BlockKind.SWITCH:
        raise ConfigError(f"lab add-unknown: {name} is a switch; a node needs a server block")
    lab = lab_mod.lab_dir(loaded)
    known = started(loaded)
    index = len(known) + 1
    label = f"unknown-{index}"
    rdir = lab / label
    password = (lab / "bmc-password").read_text().strip()
    sushy_port, shape_port = procs.free_ports(socket.SOCK_STREAM, 2)
    digest = hashlib.sha1(f"{loaded.site.site.name}/{label}".encode()).digest()  # noqa: S324
    mac = f"52:54:00:fd:{digest[0]:02x}:{index & 255:02x}"
    sys_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{label}.{loaded.site.site.name}.lab"))
    conf = rdir / "emulator.conf"
    rdir.mkdir(parents=True)
    (rdir / "tmp").mkdir()
    systems = [{"uuid": sys_uuid, "name": label, "power_state": "Off",
                "external_notifier": False, "nics": [{"mac": mac}]}]
    emulators.write_sushy_config(rdir, conf, password, systems, lab_mod.LAB_USER)
    proc = emulators.spawn_sushy(rdir, conf, sushy_port)
    lab_mod.record(state, f"redfish-{label}", proc, rdir / "emulator.log")
    try:
        procs.wait_tcp(sushy_port, timeout_s, proc, "sushy-emulator")
        shape = redfish_shape.shape(block_type, f"{loaded.site.site.name}/{label}", mac)
        shapes.start(rdir, state, [[shape_port, sushy_port]], {sys_uuid: shape}, timeout_s,
                     lab_mod.record, name=f"shape-{label}")
    finally:
        lab_mod.save(lab, state)
    node = UnknownNode(name=label, block=name, address=procs.LOOPBACK, port=shape_port,
                       scheme="http", system_id=sys_uuid, mgmt_mac=mac, serial=shape["serial"])
    _registry(lab).write_text(json.dumps([asdict(u) for u in [*known, node]], indent=2))
    return node


def adopt(loaded: LoadedSite, hostname: str, address: str, port: int) -> UnknownNode | None:
    """The unknown node at this BMC endpoint is now `hostname` (`provision add` wrote it
    into the site, `loaded`): the lab's overlay maps its BMC with the lab login, and when
    the lab has SSH hosts, one more answers on its management address, so `up --limit`
    can bring it up. None when no unknown node of this lab is at that endpoint."""
    from provisioner import lab as lab_mod

    node = next((u for u in started(loaded) if (u.address, u.port) == (address, port)),
                None)
    state = lab_mod.status(loaded)
    if node is None or state is None:
        return None
    lab = lab_mod.lab_dir(loaded)
    state.endpoints[hostname] = {"address": node.address, "port": node.port,
                                 "scheme": node.scheme, "system_id": node.system_id}
    if state.ssh_hosts and all(h.name != hostname for h in state.ssh_hosts):
        plan, network, gateway = lab_mod.ssh_plan(loaded)
        mgmt = dict(plan).get(hostname)
        if mgmt is not None:
            used = {int(h.netns.rsplit("-", 1)[-1][6:] or 0) for h in state.ssh_hosts}
            host = hosts_mod.add_host(hostname, mgmt, network, gateway, lab / "ssh",
                                      rootfs.ensure_rootfs(), state.ssh_tag,
                                      max(used, default=-1) + 1, record=lab / "lab.json")
            state.ssh_hosts.append(host)
    if state.mirror:  # the grown site may install what the lab's mirror lacks (a new block)
        info = mirror_mod.build_lab(loaded, lab, rootfs.default_cache(),
                                    rootfs.ensure_rootfs())
        state.mirror |= {"real_debs": info.real_debs, "standin_debs": info.standin_debs}
        if state.mirror.get("wheelhouse"):  # the rebuilt root keeps serving the wheels
            wheelhouse.publish(Path(state.mirror["wheelhouse"]), info.root)
    lab_mod.write_overlay(loaded, state)
    lab_mod.save(lab, state)
    return node
