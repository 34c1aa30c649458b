"""Warnings about how the tool will talk to BMCs: credentials over plain HTTP, or TLS with
verification turned off, said of the site as written (`validate`; the lab's loopback
emulators are applied to the site after the checks, lab/overlay.py). And an error when
nodes would be installed with no way in (no SSH public key). No I/O."""

from __future__ import annotations

from collections.abc import Callable

from provisioner.inventory.block_models import BlockKind
from provisioner.inventory.findings import Severity
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import BmcProtocol

Emit = Callable[..., None]


def transport_warnings(loaded: LoadedSite, emit: Emit) -> None:
    for i, p in enumerate(loaded.site.placements):
        for j, n in enumerate(p.nodes):
            bmc = n.bmc
            if bmc is None or bmc.protocol is not BmcProtocol.REDFISH:
                continue
            where = ("placements", i, "nodes", j, "bmc")
            if bmc.scheme == "http":
                emit("bmc-plain-http", (*where, "scheme"),
                     f"{n.hostname}: Redfish over plain HTTP sends the BMC password "
                     "unencrypted", "use scheme: https (the default)",
                     severity=Severity.WARNING)
            elif not bmc.tls.verify and not bmc.tls.fingerprint_sha256:
                emit("bmc-tls-unverified", (*where, "tls", "verify"),
                     f"{n.hostname}: TLS verification is off: anyone on the path can pose "
                     "as the BMC and read its password",
                     "give the site's CA in tls.ca_bundle or pin tls.fingerprint_sha256",
                     severity=Severity.WARNING)


def way_in(loaded: LoadedSite, emit: Emit) -> None:
    """No install without a way in: the autoinstall data gives `site.ssh.user` only the keys
    in `site.ssh.authorized_keys` (no password is ever set), so an empty list would install
    nodes nobody can log in to."""
    servers = [n.hostname for p in loaded.site.placements for n in p.nodes
               if loaded.catalog.get(p.block) is None
               or loaded.catalog[p.block].kind is not BlockKind.SWITCH]
    if servers and not loaded.site.site.ssh.authorized_keys:
        emit("ssh-no-way-in", ("site", "ssh") if "ssh" in loaded.site.site.model_fields_set
             else ("site",),
             f"no SSH public key for the {len(servers)} server(s) the tool installs: an "
             "installed node would accept no login (no password is set)",
             "add site.ssh.authorized_keys: ['ssh-ed25519 AAAA... admin@site'] (the public "
             "half of the key in site.ssh.private_key_file)", at_key=True)
