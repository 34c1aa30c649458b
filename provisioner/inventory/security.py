"""Warnings about how the tool will talk to BMCs: credentials over plain HTTP, or TLS with
verification turned off. Nodes whose endpoint the running lab set (loopback emulators) are
exempt: that is what the lab is for. No I/O."""

from __future__ import annotations

from collections.abc import Callable

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
            if n.hostname in loaded.lab_hosts:
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
