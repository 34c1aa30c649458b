"""The netmiko edge: the only module that imports netmiko. Dialect details are data below.

Never logs credentials: netmiko's session_log stays off, and errors name the switch only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from netmiko import ConnectHandler
from netmiko.exceptions import NetmikoAuthenticationException, NetmikoTimeoutException

from provisioner.errors import FabricError
from provisioner.switches.base import ApplyResult, Endpoint

# A refused command, across dialects: IOS/EOS/Onyx "% Invalid input" / "% Incomplete",
# FRR vtysh "% Unknown command", fake-switches "No such command".
ERROR_RE = re.compile(r"(^|\n)\s*% ?\w|No such command|Invalid input|Unknown command",
                      re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Dialect:
    device_type: str
    show_running: str
    save: str
    rollback: str  # how a failed push is undone (docs/fabric.md); "undo" = compensating lines


DIALECTS: dict[str, Dialect] = {
    # Tested over SSH against fake-switches' cisco_generic and FRRouting's vtysh
    # (tests/integration/test_switches.py, test_switches_frr.py).
    "cisco_ios": Dialect("cisco_ios", "show running-config", "write memory", "undo"),
    # Same line-based engine; not run against a device or simulator in this project.
    "eos": Dialect("arista_eos", "show running-config", "copy running-config startup-config",
                   "undo"),
    "onyx": Dialect("mellanox_mlnxos", "show running-config", "configuration write", "undo"),
}


class NetmikoDriver:
    """One SSH session to one switch (IOS-style CLI dialects)."""

    def __init__(self, ep: Endpoint) -> None:
        dialect = DIALECTS.get(ep.nos)
        if dialect is None:
            raise FabricError(f"{ep.hostname}: push over CLI is not implemented for {ep.nos}",
                              hint="see docs/fabric.md for the supported dialects")
        self.ep, self.dialect = ep, dialect
        try:
            self.conn: Any = ConnectHandler(
                device_type=dialect.device_type, host=ep.address, port=ep.port,
                username=ep.username, password=ep.password.reveal(),
                secret=ep.password.reveal(), conn_timeout=ep.timeout_s, timeout=ep.timeout_s,
                session_log=None, auto_connect=True)
            if not self.conn.check_enable_mode():
                self.conn.enable()
        except NetmikoAuthenticationException:
            raise FabricError(f"{ep.hostname}: SSH login refused for user {ep.username}",
                              hint="check the switch credentials reference") from None
        except (NetmikoTimeoutException, OSError) as exc:
            raise FabricError(f"{ep.hostname}: cannot reach {ep.address}:{ep.port} over SSH "
                              f"({type(exc).__name__})") from None

    def running_config(self) -> str:
        return str(self.conn.send_command(self.dialect.show_running))

    def apply(self, commands: Sequence[str]) -> ApplyResult:
        """Send line by line, stop at the first refused one: exactly `applied` took effect."""
        applied: list[str] = []
        self.conn.config_mode()
        try:
            for line in commands:
                out = str(self.conn.send_config_set([line], exit_config_mode=False,
                                                    enter_config_mode=False))
                if ERROR_RE.search(out.split(line, 1)[-1]):
                    return ApplyResult(tuple(applied), line, _last_line(out, line))
                applied.append(line)
        finally:
            self._leave_config()
        return ApplyResult(tuple(applied))

    def save(self) -> None:
        out = str(self.conn.send_command(self.dialect.save, expect_string=r"[>#]\s*$"))
        if ERROR_RE.search(out):
            raise FabricError(f"{self.ep.hostname}: saving the config failed: "
                              f"{out.strip().splitlines()[-1]}")

    def close(self) -> None:
        self.conn.disconnect()

    def _leave_config(self) -> None:
        # `end` is missing on some CLIs (fake-switches); `exit` per level works everywhere.
        for _ in range(4):
            if not self.conn.check_config_mode():
                return
            self.conn.send_command("exit", expect_string=r"[>#]\s*$")


def _last_line(out: str, line: str) -> str:
    after = out.split(line, 1)[-1].strip().splitlines()
    return next((x.strip() for x in after if ERROR_RE.search(x)), "refused")
