"""dnsmasq's lease file (dhcp-leasefile): the addresses the provisioning DHCP server handed
out, so discovery can probe exactly those instead of sweeping a range.

Format (dnsmasq src/lease.c, lease_update_file): one IPv4 lease per line,
`<expiry epoch> <MAC> <IP> <hostname or *> <client-id or *>`; a `duid <DUID>` line starts
the DHCPv6 leases, whose lines carry an IAID instead of a MAC (skipped here: BMCs take
IPv4 from the provisioning network).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import ConfigError

MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


@dataclass(frozen=True)
class Lease:
    mac: str
    address: str
    hostname: str | None
    expires_at: int  # epoch seconds; 0: infinite


def parse(text: str, source: str = "leases") -> list[Lease]:
    """The IPv4 leases; a malformed line is an error naming the file and line."""
    out: list[Lease] = []
    v6 = False
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "duid":
            v6 = True
            continue
        if v6:
            continue
        if len(fields) < 4:
            raise ConfigError(f"{source}:{number}: not a dnsmasq lease line "
                              f"(expiry MAC IP hostname client-id)")
        expiry, mac, address, name = fields[:4]
        if not expiry.isdigit() or not MAC_RE.match(mac.lower()):
            raise ConfigError(f"{source}:{number}: bad expiry or MAC in a dnsmasq lease")
        try:
            ip = ipaddress.IPv4Address(address)
        except ValueError:
            raise ConfigError(f"{source}:{number}: {address!r} is not an IPv4 address") \
                from None
        out.append(Lease(mac=mac.lower(), address=str(ip),
                         hostname=None if name == "*" else name, expires_at=int(expiry)))
    return out


def read(path: Path) -> list[Lease]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the lease file ({exc.strerror})") from None
    return parse(text, str(path))
