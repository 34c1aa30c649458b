"""Ubuntu autoinstall data for one node: which release, which disk the OS goes on, the keys
that let the tool in, and the node's own SSH host key.

Sources (Subiquity autoinstall reference, canonical/subiquity doc/reference/
autoinstall-reference.rst): `storage.config` takes curtin actions; a disk action with a
`match` spec is "assigned a matching disk -- chosen arbitrarily from the set of unassigned
disks", and `size: smallest` takes the smallest of the matches, so two disk actions with the
same spec take two different disks; `allow-pw` false turns password logins off (the keys go
through the `user-data` section: `identity` would need a crypted password). The host key
goes through cloud-init's `ssh_keys` (cc_ssh: `ed25519_private` / `ed25519_public`) in the
installed system's user-data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from provisioner import install
from provisioner.errors import RenderError
from provisioner.inventory.block_models import BlockType
from provisioner.secrets import write_private


@dataclass(frozen=True)
class Release:
    version: str  # 22.04
    codename: str  # jammy


# software.os -> the Ubuntu live-server release that installs it. DGX OS 6 is built on
# Ubuntu 22.04 and DGX OS 7 on 24.04 (NVIDIA DGX OS release notes); their NVIDIA layers
# come from the playbooks, not from the installer.
RELEASES = {"ubuntu-22.04": Release("22.04", "jammy"), "ubuntu-24.04": Release("24.04", "noble"),
            "dgx-os-6": Release("22.04", "jammy"), "dgx-os-7": Release("24.04", "noble")}


def release_for(os_name: str) -> Release:
    """The Ubuntu release a network install of software.os boots."""
    try:
        return RELEASES[os_name]
    except KeyError:
        raise RenderError(f"software.os {os_name}: no network install for it (Ubuntu "
                          "autoinstall only)", hint="use ubuntu-22.04 or ubuntu-24.04, or "
                          "install the OS another way and enroll the node") from None


# DGX systems whose OS lives on a pair of M.2 NVMe drives, mirrored, next to larger U.2 data
# NVMe drives (NVIDIA DGX user guides, hardware overview: A100 2x 1.92 TB M.2 OS and
# 3.84 TB U.2 data; H100/H200 and B200 2x 1.92 TB M.2 OS and 8x 3.84 TB U.2 data; DGX-2
# 2x 960 GB OS and 3.84 TB data). The two smallest disks are the OS pair on each.
DGX_M2_PAIR = frozenset({"dgx-2", "dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200"})
OS_DISK_RULES = {
    "dgx_m2_raid1": "RAID1 (md) across the two smallest disks: the M.2 boot pair, never a "
                    "larger U.2 data NVMe; an EFI partition on each",
    "smallest_disk": "LVM on the smallest disk (the boot disk of a server whose data disks "
                     "are larger); declare the block's disks if that is not so",
}


def os_disk_rule(block: BlockType) -> str:
    """The rule that picks the OS disk for a building block (a key of OS_DISK_RULES)."""
    return "dgx_m2_raid1" if block.name in DGX_M2_PAIR else "smallest_disk"


def storage(rule: str) -> dict[str, Any]:
    """The autoinstall `storage` section for a rule of OS_DISK_RULES."""
    if rule == "smallest_disk":
        return {"layout": {"name": "lvm", "match": {"size": "smallest"}}}
    config: list[dict[str, Any]] = []
    for n in (0, 1):
        disk = f"os-disk{n}"
        config += [
            {"type": "disk", "id": disk, "match": {"size": "smallest"}, "ptable": "gpt",
             "wipe": "superblock-recursive", "preserve": False, "grub_device": False},
            {"type": "partition", "id": f"{disk}-esp", "device": disk, "number": 1,
             "size": "1G", "flag": "boot", "grub_device": True, "preserve": False},
            {"type": "partition", "id": f"{disk}-root", "device": disk, "number": 2,
             "size": -1, "preserve": False},
        ]
    config += [
        # Both ESPs formatted and given to grub (either disk can boot); one is mounted.
        {"type": "format", "id": "esp-fs", "volume": "os-disk0-esp", "fstype": "fat32",
         "preserve": False},
        {"type": "format", "id": "esp-fs1", "volume": "os-disk1-esp", "fstype": "fat32",
         "preserve": False},
        {"type": "raid", "id": "os-md", "name": "md0", "raidlevel": "raid1",
         "devices": ["os-disk0-root", "os-disk1-root"], "preserve": False},
        {"type": "format", "id": "root-fs", "volume": "os-md", "fstype": "ext4",
         "preserve": False},
        {"type": "mount", "id": "root-mount", "device": "root-fs", "path": "/"},
        {"type": "mount", "id": "esp-mount", "device": "esp-fs", "path": "/boot/efi"},
    ]
    return {"swap": {"size": 0}, "config": config}


@dataclass(frozen=True)
class HostKey:
    private_openssh: str  # a secret: only in 0600 files of the private boot directory
    public: str  # "ssh-ed25519 AAAA..."


def host_key(keys_dir: Path, hostname: str) -> HostKey:
    """The node's ed25519 host key, made once and kept (keys_dir/<host>, 0600) so that a
    re-render keeps known_hosts true for nodes already installed."""
    path = keys_dir / hostname / "ssh_host_ed25519_key"
    if path.is_file():
        try:
            key = serialization.load_ssh_private_key(path.read_bytes(), password=None)
        except (ValueError, TypeError) as exc:  # not an OpenSSH key, or one with a passphrase
            raise RenderError(f"{path} is not an OpenSSH private key ({exc})",
                              hint="restore the node's key from a backup, or delete it to "
                              "make a new one (the node's known_hosts line then changes)"
                              ) from None
        if not isinstance(key, Ed25519PrivateKey):
            raise RenderError(f"{path} is not an ed25519 key", hint="delete it to make a new one")
    else:
        key = Ed25519PrivateKey.generate()
        keys_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        (keys_dir / hostname).mkdir(mode=0o700, exist_ok=True)
        write_private(path, key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption()).decode())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH).decode()
    private = path.read_text()
    return HostKey(private_openssh=private, public=f"{public} root@{hostname}")


@dataclass(frozen=True)
class NodeInstall:
    hostname: str
    mac: str
    address: str  # with prefix: 10.250.0.21/24
    gateway: str | None
    block: BlockType
    nameservers: tuple[str, ...] = ()  # software.sources.dns_servers
    search: tuple[str, ...] = ()  # software.sources.dns_search
    # Booted from a provisioning network: the management NIC's MAC, its address (with
    # prefix) and the management network's gateway. Ansible reaches the installed node
    # there, so the installer's network brings it up too (the default route goes by it).
    mgmt: tuple[str, str, str | None] | None = None


def _install_network(node: NodeInstall) -> dict[str, Any]:
    """The installer's (and so the installed system's) netplan ethernets: the boot NIC and,
    when the node booted from a provisioning network, its management NIC (the same NIC
    when the MACs agree: both addresses on it). One default route: the management
    network's gateway when there is one, else the boot network's."""
    boot: dict[str, Any] = {"match": {"macaddress": node.mac}, "set-name": "boot",
                            "addresses": [node.address]}
    ethernets = {"boot": boot}
    route_on, gateway = boot, node.gateway
    if node.mgmt is not None:
        mac, address, mgmt_gateway = node.mgmt
        if mac.lower() == node.mac.lower():
            boot["addresses"].append(address)
            mgmt = boot
        else:
            mgmt = ethernets["mgmt"] = {"match": {"macaddress": mac}, "set-name": "mgmt",
                                        "addresses": [address]}
        if mgmt_gateway:
            route_on, gateway = mgmt, mgmt_gateway
    if gateway:
        route_on["routes"] = [{"to": "default", "via": gateway}]
    # netplan's nameservers (addresses, search); the installer writes this network config
    # into the installed system, whose address is static: its only resolvers.
    if node.nameservers or node.search:
        route_on["nameservers"] = {k: list(v) for k, v in (
            ("addresses", node.nameservers), ("search", node.search)) if v}
    return ethernets


def user_data(node: NodeInstall, *, user: str, keys: list[str], key: HostKey,
              mirror: str, callback_url: str) -> dict[str, Any]:
    """The autoinstall document for one node (#cloud-config user-data). Its disk guard
    (install.disk_guard) runs first and reports a refusal to `callback_url`; the grant and
    the boot token are filled in by the boot server when the node fetches it."""
    if not keys:
        raise RenderError(f"{node.hostname}: no SSH public key: an installed node would "
                          "accept no login", hint="set site.ssh.authorized_keys")
    # The installed system's cloud-init: its host key (so known_hosts is known before it
    # boots) and, for a non-root user, the user with the keys and no password.
    cloud: dict[str, Any] = {
        "hostname": node.hostname,
        "ssh_deletekeys": True,
        "ssh_genkeytypes": [],
        "ssh_keys": {"ed25519_private": key.private_openssh,
                     "ed25519_public": key.public.rsplit(" ", 1)[0]},
    }
    late = [f"echo '{install.marker_line(node.hostname)}' > /target{install.MARKER}"]
    if user == "root":
        cloud["disable_root"] = False
        late += ["mkdir -p -m 700 /target/root/.ssh"] + [
            f"echo '{k}' >> /target/root/.ssh/authorized_keys" for k in keys]
    else:
        cloud["users"] = [{"name": user, "lock_passwd": True, "shell": "/bin/bash",
                           "sudo": "ALL=(ALL) NOPASSWD:ALL", "ssh_authorized_keys": keys}]
    rule = os_disk_rule(node.block)
    ethernets = _install_network(node)
    doc: dict[str, Any] = {
        "version": 1,
        "user-data": cloud,
        # Keys go through user-data (no `identity`, which needs a crypted password).
        "ssh": {"install-server": True, "allow-pw": False},
        # before any disk is probed or touched: refuse one that holds something
        "early-commands": [install.disk_guard(callback_url)],
        "storage": storage(rule),
        "network": {"version": 2, "ethernets": ethernets},
        "late-commands": late,
    }
    if mirror:
        doc["apt"] = {"primary": [{"arches": ["default"], "uri": mirror}], "fallback": "abort"}
    return {"autoinstall": doc}
