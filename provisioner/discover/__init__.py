"""`provision discover`: find BMCs the inventory does not know, read their hardware, say
which catalog block each one is, and record them in the state store as `discovered`.

Where to look: the addresses of one or more CIDR ranges and/or the provisioning dnsmasq's
leases. Every address is probed without credentials (bmc/probe.py: Redfish service root,
RMCP presence ping) on the one fan-out (provisioner/fanout.py), with bounded
concurrency, a pace of at most `rate_per_s` new probes a second and short timeouts, so a
sweep does not flood a management network. An endpoint the inventory already names is
left alone. Each new BMC is then read with the site's BMC login (the credentials entry its
BMCs share, or the one named) and fingerprinted against the catalog (fingerprint.py).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from provisioner.bmc import make_driver
from provisioner.bmc.base import BmcTarget, HardwareFacts
from provisioner.bmc.probe import ipmi_presence, redfish_root
from provisioner.credentials import CredentialResolver
from provisioner.discover.fingerprint import Fingerprint, fingerprint
from provisioner.discover.leases import Lease
from provisioner.errors import ConfigError, ProvisionerError
from provisioner.fanout import fan_out
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import Tls
from provisioner.inventory.topology import bmc_nodes
from provisioner.lifecycle import Phase
from provisioner.state import StateStore

MAX_ADDRESSES = 4096  # a /20: beyond that a sweep is a mistake more often than a plan


@dataclass(frozen=True)
class ProbePlan:
    """Where and how politely to look."""

    addresses: tuple[str, ...]
    redfish_ports: tuple[int, ...] = (443,)
    scheme: str = "https"
    ipmi_port: int | None = 623  # None: no IPMI probe
    timeout_s: float = 1.0
    concurrency: int = 32
    rate_per_s: float = 100.0  # new probes started per second, all workers together


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a name: not known to stay on this machine
        return False


def plain_http_warning(plan: ProbePlan) -> str | None:
    """--scheme http outside loopback: the site's shared BMC login would go in clear (HTTP
    Basic auth) to whatever answers, which `validate`'s bmc-plain-http warning never sees."""
    if plan.scheme != "http":
        return None
    remote = [a for a in plan.addresses if not _loopback(a)]
    if not remote:
        return None
    return (f"--scheme http: the BMC login goes unencrypted (HTTP Basic auth) to each BMC "
            f"found at {len(remote)} address(es) beyond loopback; use https (the default) "
            "outside the lab")


@dataclass(frozen=True)
class Found:
    """One BMC answering at address:port."""

    protocol: str  # redfish | ipmi
    address: str
    port: int
    scheme: str | None = None
    vendor: str | None = None  # from the Redfish service root
    mac: str | None = None  # from a DHCP lease


@dataclass(frozen=True)
class Discovered:
    id: str  # the state store's name for it until `provision add` gives it a host name
    found: Found
    facts: HardwareFacts | None
    fingerprint: Fingerprint | None
    error: str | None = None
    new: bool = True  # False: already recorded as discovered by an earlier run


@dataclass
class DiscoverResult:
    probed: int
    known_skipped: int
    nodes: list[Discovered] = field(default_factory=list)
    credentials: str | None = None


def addresses(ranges: Sequence[str], leases: Sequence[Lease]) -> tuple[str, ...]:
    """The addresses to probe: every host of each range, then each lease's, deduplicated."""
    out: dict[str, None] = {}
    for cidr in ranges:
        try:
            net = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise ConfigError(f"--range {cidr!r} is not a CIDR range",
                              hint="for example 10.250.1.0/24") from None
        if net.num_addresses > MAX_ADDRESSES:
            raise ConfigError(f"--range {cidr} has {net.num_addresses} addresses; at most "
                              f"{MAX_ADDRESSES} per run", hint="split it, or use --from-leases")
        hosts = [net.network_address] if net.num_addresses == 1 else list(net.hosts())
        for ip in hosts:
            out[str(ip)] = None
    for lease in leases:
        out[lease.address] = None
    return tuple(out)


class _Pacer:
    """At most `rate_per_s` starts a second across threads (a token every 1/rate s)."""

    def __init__(self, rate_per_s: float) -> None:
        self.interval_s = 1.0 / rate_per_s if rate_per_s > 0 else 0.0
        self.next_at = time.monotonic()
        self.lock = threading.Lock()

    def wait(self) -> None:
        with self.lock:
            now = time.monotonic()
            at = max(now, self.next_at)
            self.next_at = at + self.interval_s
        if at > now:
            time.sleep(at - now)


def probe(plan: ProbePlan) -> list[Found]:
    """Every BMC that answers among the plan's addresses and ports, in address order."""
    keys = [f"redfish|{a}|{p}" for a in plan.addresses for p in plan.redfish_ports]
    if plan.ipmi_port is not None:
        keys += [f"ipmi|{a}|{plan.ipmi_port}" for a in plan.addresses]
    pacer = _Pacer(plan.rate_per_s)

    def one(key: str) -> Found | None:
        kind, address, port_text = key.split("|")
        port = int(port_text)
        pacer.wait()
        if kind == "redfish":
            root = redfish_root(address, port, plan.scheme, plan.timeout_s)
            return None if root is None else Found("redfish", address, port, plan.scheme,
                                                   root.vendor)
        return Found("ipmi", address, port) if ipmi_presence(address, port,
                                                              plan.timeout_s) else None

    done = fan_out(keys, one, concurrency=plan.concurrency,
                   deadline_s=plan.timeout_s * 3 + 5)
    found = [d.value for d in done if d.ok and d.value is not None]
    redfish_at = {f.address for f in found if f.protocol == "redfish"}
    # A BMC that speaks both is read over Redfish (richer facts); IPMI only as fallback.
    return [f for f in found if f.protocol == "redfish" or f.address not in redfish_at]


def known_endpoints(loaded: LoadedSite) -> set[tuple[str, int]]:
    """(address, port) of every BMC the inventory (with the lab overlay, if up) names."""
    out = set()
    for node in bmc_nodes(loaded):
        if node.bmc is not None:
            address, port, _ = node.bmc.endpoint_key()
            out.add((address, port))
    return out


def default_credentials(loaded: LoadedSite) -> str:
    """The credentials entry the site's BMCs share (the most used one)."""
    names = Counter(n.bmc.credentials for n in bmc_nodes(loaded) if n.bmc is not None)
    if not names:
        raise ConfigError("discover: the site has no BMC to take a login from",
                          hint="name one with --credentials")
    return names.most_common(1)[0][0]


def node_id(found: Found, facts: HardwareFacts | None) -> str:
    """A stable name for a discovered node: its serial, else its BMC endpoint."""
    serial = re.sub(r"[^a-z0-9]+", "-", (facts.serial or "").lower()).strip("-") \
        if facts else ""
    if serial:
        return f"disc-{serial}"[:63]
    digest = hashlib.sha1(f"{found.address}:{found.port}".encode()).hexdigest()[:10]  # noqa: S324
    return f"disc-{digest}"


def read_facts(found: Sequence[Found], login_name: str, loaded: LoadedSite,
               env: Mapping[str, str], *, timeout_s: float, concurrency: int,
               tls: Tls) -> dict[str, tuple[HardwareFacts | None, str | None]]:
    """`address:port` -> (facts, error) for each found BMC, read with the named login."""
    login = CredentialResolver(loaded, env).login(login_name, user_of="discover")
    by_key = {f"{f.address}:{f.port}": f for f in found}

    def one(key: str) -> HardwareFacts:
        f = by_key[key]
        target = BmcTarget(node=key, protocol=f.protocol, address=f.address, port=f.port,
                           username=login.username, password=login.password,
                           scheme=f.scheme or "https", tls=tls, request_timeout_s=timeout_s)
        driver = make_driver(target)
        try:
            driver.validate()
            return driver.hardware_facts()
        finally:
            driver.close()

    out: dict[str, tuple[HardwareFacts | None, str | None]] = {}
    for d in fan_out(list(by_key), one, concurrency=concurrency,
                     deadline_s=timeout_s * 6 + 10):
        if d.ok:
            out[d.key] = (d.value, None)
        else:
            why = "timed out" if d.timed_out else (
                d.error.message if isinstance(d.error, ProvisionerError) else
                f"{type(d.error).__name__}")
            out[d.key] = (None, why)
    return out


def discover(loaded: LoadedSite, env: Mapping[str, str], store: StateStore, plan: ProbePlan,
             *, leases: Sequence[Lease] = (), credentials: str | None = None,
             tls: Tls | None = None) -> DiscoverResult:
    """Probe, read, fingerprint, and record new BMCs as discovered nodes."""
    known = known_endpoints(loaded)
    found = probe(plan)
    new = [f for f in found if (f.address.lower(), f.port) not in known]
    mac_of = {lease.address: lease.mac for lease in leases}
    new = [Found(f.protocol, f.address, f.port, f.scheme, f.vendor, mac_of.get(f.address))
           for f in new]
    result = DiscoverResult(probed=len(plan.addresses), known_skipped=len(found) - len(new))
    if not new:
        return result
    login = credentials or default_credentials(loaded)
    result.credentials = login
    facts = read_facts(new, login, loaded, env, timeout_s=max(plan.timeout_s, 5.0),
                       concurrency=plan.concurrency, tls=tls or Tls())
    run_id = store.start_run("discover")
    try:
        for f in new:
            got, error = facts[f"{f.address}:{f.port}"]
            fp = fingerprint(got, loaded.catalog) if got is not None else None
            ident = node_id(f, got)
            added = store.enroll([ident], run_id, phase=Phase.DISCOVERED)
            store.record(ident, "discovery", _event(f, got, fp, error), run_id)
            result.nodes.append(Discovered(ident, f, got, fp, error, new=bool(added)))
    finally:
        store.end_run(run_id, "ok")
    return result


def _event(f: Found, facts: HardwareFacts | None, fp: Fingerprint | None,
           error: str | None) -> dict[str, object]:
    """What discovery saw (no secret: endpoint, facts, fingerprint), for `provision add`."""
    return {"bmc": {"protocol": f.protocol, "address": f.address, "port": f.port,
                    "scheme": f.scheme},
            "lease_mac": f.mac, "error": error,
            "facts": None if facts is None else {
                "vendor": facts.vendor, "model": facts.model, "serial": facts.serial,
                "gpus": [[g.model, g.count] for g in facts.gpus],
                "nvswitch_count": facts.nvswitch_count, "macs": list(facts.macs),
                "mgmt_mac": facts.mgmt_mac, "mgmt_mac_how": facts.mgmt_mac_how},
            "block": fp.block if fp else None,
            "confidence": fp.confidence if fp else None,
            "reasons": list(fp.reasons) if fp else []}
