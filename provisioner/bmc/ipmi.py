"""IPMI driver on pyghmi (in-process RMCP+: the password is never on a command line).

Cipher suite 17 (RAKP-HMAC-SHA256) is required by default. pyghmi proposes SHA-256 first
and silently falls back to SHA-1 (suite 3); this driver refuses that downgrade unless the
inventory sets `cipher_suite: 3` for the BMC (old BMCs and OpenIPMI's ipmi_sim need it).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pyghmi import exceptions as pyghmi_exc
from pyghmi.ipmi import command as ipmi_command
from pyghmi.ipmi.private import session as ipmi_session

from provisioner.bmc import firmware
from provisioner.bmc.base import (
    ACTION_TARGET,
    BmcTarget,
    BootDevice,
    BootMode,
    BootSetting,
    FirmwareFact,
    HardwareFacts,
    PowerAction,
    PowerState,
    answered,
    power_cycle,
    request_power,
)
from provisioner.bmc.retry import RetryPolicy, retry
from provisioner.errors import (
    BmcAuthError,
    BmcError,
    BmcRefused,
    BmcUnreachable,
    BmcUnsupported,
)

T = TypeVar("T")

# ---------------------------------------------------------------- mapping tables

POWER_FROM_IPMI = {"on": PowerState.ON, "off": PowerState.OFF}
POWER_ACTION_TO_IPMI = {
    PowerAction.ON: "on",
    PowerAction.OFF: "off",
    PowerAction.SOFT_OFF: "shutdown",
    PowerAction.RESET: "reset",
}
BOOT_TO_IPMI = {
    BootDevice.PXE: "network",
    BootDevice.DISK: "hd",
    BootDevice.CD: "optical",
    BootDevice.BIOS: "setup",
    BootDevice.NONE: "default",
}
BOOT_FROM_IPMI = {
    "network": BootDevice.PXE,
    "hd": BootDevice.DISK,
    "optical": BootDevice.CD,
    "setup": BootDevice.BIOS,
    "default": BootDevice.NONE,
}
SHA1_HASH = 1  # pyghmi's Session.attemptedhash after falling back to cipher suite 3


class IpmiDriver:
    """One node's IPMI BMC."""

    def __init__(self, target: BmcTarget, *, retry_policy: RetryPolicy | None = None,
                 poll_interval_s: float = 0.5,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.target = target
        self.retry_policy = retry_policy or RetryPolicy()
        self.poll_interval_s = poll_interval_s
        self._sleep = sleep
        self._cmd: Any = None

    def validate(self) -> None:
        t = self.target
        if t.protocol != "ipmi":
            raise BmcUnsupported(f"{t.node}: not an IPMI BMC ({t.protocol})")
        if len(t.username) > 16:
            raise BmcUnsupported(f"{t.node}: IPMI user names are at most 16 characters")
        if t.cipher_suite not in (3, 17):
            raise BmcUnsupported(f"{t.node}: cipher suite {t.cipher_suite} is not supported",
                                 hint="use 17, or 3 for BMCs that cannot do 17")

    def _map(self, exc: Exception) -> BmcError:
        node = self.target.node
        text = " ".join(str(exc).split())[:200]
        lowered = text.lower()
        if any(s in lowered for s in ("password", "unauthorized", "privilege",
                                      "rakp", "authentication", "invalid user")):
            return BmcAuthError(f"{node}: BMC refused the credentials ({text})",
                                hint="check the username and the password reference")
        # pyghmi gives up on a silent BMC with an exception that carries no message.
        if lowered in ("", "none") or any(s in lowered for s in ("timeout", "timed out",
                                                                  "no response", "unreachable")):
            return BmcUnreachable(
                f"{node}: no IPMI answer from {self.target.address}:{self.target.port or 623}",
                hint="check the address, UDP port and that the BMC is on the network")
        if "invalid data field" in lowered or "invalid command" in lowered \
                or "not supported" in lowered:
            return BmcUnsupported(f"{node}: {text}")
        return BmcRefused(f"{node}: {text}", status=500)  # unknown: worth a retry

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except BmcError:
            raise
        except (pyghmi_exc.IpmiException, OSError, AssertionError, KeyError,
                TypeError) as exc:
            if "no longer connected" in str(exc) or isinstance(exc, TypeError):
                # pyghmi lost or reused a stale session: drop it; the retry logs in again.
                self._drop()
                raise BmcUnreachable(f"{self.target.node}: IPMI session lost") from None
            raise self._map(exc) from None

    def _drop(self) -> None:
        cmd, self._cmd = self._cmd, None
        if cmd is not None:
            self._logout(cmd)

    def _retry(self, fn: Callable[[], T],
               only: Callable[[BmcError], bool] | None = None) -> T:
        return retry(lambda: self._call(fn), self.retry_policy, sleep=self._sleep, only=only)

    def _connect(self) -> Any:
        if self._cmd is not None:
            return self._cmd
        t = self.target

        def login() -> Any:
            cmd = ipmi_command.Command(bmc=t.address, userid=t.username,
                                       password=t.password.reveal(), port=t.port or 623,
                                       keepalive=False)
            return cmd

        try:
            cmd = self._call(login)
        except BmcUnreachable as exc:
            # pyghmi already retried the login for several seconds: do not multiply that.
            exc.transient = False
            raise
        session = getattr(cmd, "ipmi_session", None)
        if t.cipher_suite == 17 and getattr(session, "attemptedhash", None) == SHA1_HASH:
            self._logout(cmd)
            raise BmcRefused(
                f"{t.node}: the BMC only negotiated cipher suite 3 (SHA-1); 17 is required",
                hint="if this BMC cannot do suite 17, set bmc.cipher_suite: 3 for it")
        self._cmd = cmd
        return cmd

    @staticmethod
    def _logout(cmd: Any) -> None:
        """Log out and drop the session from pyghmi's cache.

        pyghmi 1.6 keeps a logged-out session in Session.initting_sessions and hands it to
        the next Command for the same BMC, which then fails (TypeError in raw_command).
        Its _mark_broken() logs out but looks the entry up by the encoded credentials, so
        the entry is removed here by identity.
        """
        session = getattr(cmd, "ipmi_session", None)
        with contextlib.suppress(Exception):  # best effort; the BMC times sessions out
            session._mark_broken()  # type: ignore[union-attr]
        cache = getattr(ipmi_session.Session, "initting_sessions", {})
        for key, value in list(cache.items()):
            if value is session:
                cache.pop(key, None)

    # -------------------------------------------------------- power

    def get_power_state(self) -> PowerState:
        raw = self._retry(lambda: self._connect().get_power())
        return POWER_FROM_IPMI.get(str(raw.get("powerstate")), PowerState.UNKNOWN)

    def set_power(self, action: PowerAction, timeout_s: float) -> PowerState:
        if action is PowerAction.CYCLE:
            return power_cycle(self.set_power, timeout_s)
        start = time.monotonic()
        deadline = start + timeout_s
        current = self.get_power_state()
        target = ACTION_TARGET[action]
        if action in (PowerAction.ON, PowerAction.OFF, PowerAction.SOFT_OFF) and current is target:
            return current

        def send() -> Any:
            cmd = self._retry(self._connect)  # logged in first: a failure here sent nothing
            return self._retry(lambda: cmd.set_power(POWER_ACTION_TO_IPMI[action], wait=False),
                               only=answered)

        remaining = max(1.0, deadline - time.monotonic())
        return request_power(send, self.get_power_state, target,
                             remaining, node=self.target.node, what=action.value,
                             interval_s=self.poll_interval_s, max_interval_s=3.0,
                             sleep=self._sleep)

    # -------------------------------------------------------- boot

    def get_boot_device(self) -> BootSetting:
        raw = self._retry(lambda: self._connect().get_bootdev())
        device = BOOT_FROM_IPMI.get(str(raw.get("bootdev")), BootDevice.NONE)
        mode = {True: BootMode.UEFI, False: BootMode.LEGACY}.get(raw.get("uefimode"))
        return BootSetting(device=device, persistent=raw.get("persistent"), mode=mode)

    def set_boot_device(self, device: BootDevice, *, persistent: bool = False,
                        mode: BootMode = BootMode.UEFI) -> BootSetting:
        self._retry(lambda: self._connect().set_bootdev(
            BOOT_TO_IPMI[device], persist=persistent, uefiboot=mode is BootMode.UEFI))
        got = self.get_boot_device()
        if got.device is device:
            return got
        if got.device is BootDevice.NONE:
            # Many BMCs (and ipmi_sim) answer "boot flags invalid" to a read-back: the set was
            # accepted but cannot be verified from here.
            return BootSetting(device=device, persistent=None, mode=None, verified=False)
        raise BmcRefused(f"{self.target.node}: boot device did not take: asked "
                         f"{device.value}, the BMC reports {got.device.value}")

    # -------------------------------------------------------- inspection

    def hardware_facts(self) -> HardwareFacts:
        state = self.get_power_state()
        system: dict[str, Any] = {}
        try:
            for name, info in self._call(lambda: list(self._connect().get_inventory())):
                if name == "System" and isinstance(info, dict):
                    system = info
                    break
        except BmcError:
            system = {}  # no FRU data: many BMCs (and ipmi_sim) have none
        return HardwareFacts(
            vendor=system.get("Manufacturer") or system.get("Board manufacturer"),
            model=system.get("Product name") or system.get("Board product name"),
            serial=system.get("Serial Number") or system.get("Board serial number"),
            power_state=state, firmware=self._firmware())

    def _firmware(self) -> tuple[FirmwareFact, ...]:
        """The BMC's firmware revision (Get Device ID, NetFn App 0x06, command 0x01): every
        IPMI BMC answers it; the BIOS and other components are not IPMI's to tell."""
        try:
            reply = self._call(lambda: self._connect().raw_command(netfn=0x06, command=0x01))
        except BmcError:
            return ()
        fact = firmware.from_device_id(list(reply.get("data") or [])) \
            if isinstance(reply, dict) and not reply.get("error") else None
        return (fact,) if fact is not None else ()

    def power_reading_w(self) -> float | None:
        try:
            return float(self._call(lambda: self._connect().get_system_power_watts()))
        except (BmcUnsupported, BmcRefused):
            return None  # no DCMI power reading on this BMC

    def insert_virtual_media(self, image_url: str) -> None:
        raise BmcUnsupported(f"{self.target.node}: IPMI has no standard virtual media",
                             hint="use Redfish for virtual-media boot, or PXE")

    def eject_virtual_media(self) -> None:
        raise BmcUnsupported(f"{self.target.node}: IPMI has no standard virtual media")

    def close(self) -> None:
        self._drop()

