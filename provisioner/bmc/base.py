"""The BMC driver protocol and the neutral vocabulary every driver maps its protocol onto.

Ironic's split, trimmed: power (get/set with polling), management (boot device), inspection
(hardware facts, power reading), virtual media. Nothing outside bmc/ sees sushy or pyghmi.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from provisioner import lazy
from provisioner.bmc.retry import poll_until
from provisioner.errors import BmcError, BmcRefused, BmcTimeout, BmcUnreachable

if TYPE_CHECKING:  # the inventory's models (pydantic) are not imported with the BMC layer
    from provisioner.inventory.models import Tls
    from provisioner.secrets import Secret


class PowerState(StrEnum):
    ON = "on"
    OFF = "off"
    POWERING_ON = "powering_on"
    POWERING_OFF = "powering_off"
    UNKNOWN = "unknown"


class PowerAction(StrEnum):
    ON = "on"
    OFF = "off"  # hard off
    SOFT_OFF = "soft_off"  # ACPI shutdown
    CYCLE = "cycle"  # off, seen off, then on (on if it was off): see power_cycle
    RESET = "reset"  # warm reset: the state stays on, so it cannot be checked by polling


# Which steady state each action must end in.
ACTION_TARGET = {
    PowerAction.ON: PowerState.ON,
    PowerAction.OFF: PowerState.OFF,
    PowerAction.SOFT_OFF: PowerState.OFF,
    PowerAction.CYCLE: PowerState.ON,
    PowerAction.RESET: PowerState.ON,
}


class BootDevice(StrEnum):
    PXE = "pxe"
    DISK = "disk"
    CD = "cd"  # virtual media
    BIOS = "bios"  # firmware setup
    NONE = "none"  # no override


class BootMode(StrEnum):
    UEFI = "uefi"
    LEGACY = "legacy"


@dataclass(frozen=True)
class BootSetting:
    device: BootDevice
    persistent: bool | None = None  # None: the BMC does not say
    mode: BootMode | None = None
    verified: bool = True  # False: accepted, but the BMC cannot report it back


@dataclass(frozen=True)
class Gpu:
    model: str
    count: int


@dataclass(frozen=True)
class NicFact:
    name: str
    mac: str | None
    speed_mbps: int | None = None


@dataclass(frozen=True)
class PsuFact:
    name: str
    capacity_w: float | None = None
    healthy: bool | None = None


@dataclass(frozen=True)
class FirmwareFact:
    """One firmware component and its version, as the BMC reports it (bmc/firmware.py)."""

    id: str
    name: str
    version: str
    updateable: bool | None = None
    source: str = ""  # where it was read: FirmwareInventory, System.BiosVersion, ...


@dataclass(frozen=True)
class HardwareFacts:
    vendor: str | None = None
    model: str | None = None
    serial: str | None = None
    cpu_count: int | None = None
    cpu_model: str | None = None
    memory_gib: float | None = None
    gpus: tuple[Gpu, ...] = ()
    nics: tuple[NicFact, ...] = ()
    psus: tuple[PsuFact, ...] = ()
    power_state: PowerState = PowerState.UNKNOWN
    # NVSwitches the chassis links to; None: the BMC does not say (most do not).
    nvswitch_count: int | None = None
    # The NIC the node network-boots from, as the BMC says (redfish_map.management_nic);
    # None when it does not, and mgmt_mac_how says how it said so, or why not.
    mgmt_mac: str | None = None
    mgmt_mac_how: str | None = None
    firmware: tuple[FirmwareFact, ...] = ()

    @property
    def gpu_count(self) -> int:
        return sum(g.count for g in self.gpus)

    @property
    def macs(self) -> tuple[str, ...]:
        return tuple(sorted(n.mac for n in self.nics if n.mac))


def _default_tls() -> Tls:
    """The inventory's default TLS settings; its models are imported when a target is made
    without one (by a fan-out's threads too: through lazy.module)."""
    tls: Tls = lazy.module("provisioner.inventory.models").Tls()
    return tls


@dataclass(frozen=True)
class BmcTarget:
    """Everything a driver needs for one node. The password stays a Secret until the edge."""

    node: str
    protocol: str
    address: str
    port: int | None
    username: str
    password: Secret = field(repr=False)
    system_id: str | None = None
    scheme: str = "https"
    tls: Tls = field(default_factory=_default_tls)
    cipher_suite: int = 17
    request_timeout_s: float = 10.0


def request_power(send: Callable[[], object], read: Callable[[], PowerState],
                  target: PowerState, timeout_s: float, *, node: str, what: str,
                  interval_s: float, max_interval_s: float,
                  sleep: Callable[[float], None]) -> PowerState:
    """Send a power request and wait until the BMC reports `target`.

    A BMC can accept a request and never act on it ("lies"): the request is sent again after
    half the time, and the node fails with a timeout after all of it. A power request is
    not idempotent (a second reset undoes the one-time boot the first one used): it is sent
    with send_once, and the state read back decides.
    """
    start = time.monotonic()
    last = PowerState.UNKNOWN
    for attempt in range(2):
        send_once(send)
        until = start + timeout_s / 2 if attempt == 0 else start + timeout_s
        last = poll_until(read, lambda state: state is target, until, interval_s=interval_s,
                          max_interval_s=max_interval_s, sleep=sleep)
        if last is target:
            return last
    raise BmcTimeout(f"{node}: asked for power {target.value} ({what}) twice; the BMC still "
                     f"reports {last.value} after {timeout_s:g} s")


def send_once(send: Callable[[], object]) -> None:
    """Send a request that is not safe to send twice (a reset, a media insert; `send`
    retries only what `answered` allows). One that timed out or lost its connection may
    have been carried out: it is not sent again, and the caller's read-back decides."""
    try:
        send()
    except (BmcTimeout, BmcUnreachable) as exc:
        if not exc.transient:
            raise


def answered(exc: BmcError) -> bool:
    """Whether the BMC answered a request with a refusal (409, 5xx): it did not act, so the
    request may be sent again. Timeouts and lost connections may follow an action."""
    return isinstance(exc, BmcRefused)


def power_cycle(set_power: Callable[[PowerAction, float], PowerState],
                timeout_s: float) -> PowerState:
    """A cycle as off, seen off, then on, seen on. A PowerCycle or ForceRestart request
    leaves the reported state on before and after, so polling could not tell a BMC that
    acted from one that accepted the request and did nothing."""
    deadline = time.monotonic() + timeout_s
    set_power(PowerAction.OFF, timeout_s / 2)
    return set_power(PowerAction.ON, max(1.0, deadline - time.monotonic()))


@runtime_checkable
class BmcDriver(Protocol):
    """One node's BMC. Methods raise BmcError subclasses; none prints or sleeps forever."""

    target: BmcTarget

    def validate(self) -> None:
        """Check the target can work with this driver, without any I/O."""

    def get_power_state(self) -> PowerState: ...

    def set_power(self, action: PowerAction, timeout_s: float) -> PowerState:
        """Do the action, then poll until the BMC reports its target state (or time out)."""

    def set_boot_device(self, device: BootDevice, *, persistent: bool = False,
                        mode: BootMode = BootMode.UEFI) -> BootSetting:
        """Set the next (or every) boot device; read it back and return what the BMC reports."""

    def get_boot_device(self) -> BootSetting: ...

    def hardware_facts(self) -> HardwareFacts: ...

    def power_reading_w(self) -> float | None:
        """Present input power in watts, or None where the BMC offers no reading."""

    def insert_virtual_media(self, image_url: str) -> None: ...

    def eject_virtual_media(self) -> None: ...

    def close(self) -> None: ...
