"""The netmiko edge: the only module that imports netmiko. Dialect details are data below.

Never logs credentials: netmiko's session_log stays off, and errors name the switch only.
Every netmiko and paramiko exception becomes a FabricError with a short reason of our own
(`raise ... from None`): their messages and tracebacks never reach the user.
"""

from __future__ import annotations

import base64
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from netmiko import ConnectHandler
from netmiko.exceptions import (
    NetmikoAuthenticationException,
    NetmikoBaseException,
    NetmikoTimeoutException,
)

# paramiko (netmiko's SSH client) ships no type hints
from paramiko.ssh_exception import (  # type: ignore[import-untyped]
    NoValidConnectionsError,
    SSHException,
)

from provisioner.errors import FabricError
from provisioner.switches.base import Endpoint, SentLines

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
    # EOS: lines go into a `configure session`; a refused one aborts it (nothing applied),
    # else `commit`. Arista EOS manual, "Configuration Sessions"; arista.eos's cliconf
    # (eos_use_sessions) drives pushes the same way.
    session: bool = False


DIALECTS: dict[str, Dialect] = {
    # Tested over SSH against fake-switches' cisco_generic and FRRouting's vtysh
    # (tests/integration/test_switches.py, test_switches_frr.py).
    "cisco_ios": Dialect("cisco_ios", "show running-config", "write memory", "undo"),
    # Same line-based engine; not run against a device or simulator in this project.
    "eos": Dialect("arista_eos", "show running-config", "copy running-config startup-config",
                   "session", session=True),
    "onyx": Dialect("mellanox_mlnxos", "show running-config", "configuration write", "undo"),
}


SESSION = "provision-fabric"


# What the SSH libraries raise: netmiko's own, paramiko's (netmiko lets some through,
# EOFError among them when a peer hangs up mid-handshake), and the socket's.
SSH_ERRORS = (NetmikoBaseException, SSHException, EOFError, OSError, ValueError)


def reason(exc: BaseException, timeout_s: float) -> str:
    """Why a connection failed, in our words: netmiko raises its timeout for every failure
    to connect, with the socket's or paramiko's error as its context (never its text,
    which holds the device's address and paramiko's internals)."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(seen) < 8:
        seen.append(cur)
        if isinstance(cur, NoValidConnectionsError):  # one socket error per address tried
            seen.extend(e for e in cur.errors.values() if isinstance(e, BaseException))
            break
        cur = cur.__cause__ or cur.__context__
    for e in reversed(seen):  # the innermost cause speaks first
        if isinstance(e, ConnectionRefusedError):
            return "connection refused: nothing listens on that port"
        if isinstance(e, socket.gaierror):
            return "the name does not resolve"
        if isinstance(e, TimeoutError | socket.timeout):
            return f"no answer within {timeout_s:g} s"
        if isinstance(e, ConnectionResetError | BrokenPipeError | EOFError):
            return "the peer closed the connection"
        if isinstance(e, SSHException) and "banner" in str(e):
            return "no SSH server answered there (no SSH banner)"
        if isinstance(e, OSError) and e.strerror:
            return e.strerror.lower()
    if isinstance(exc, NetmikoTimeoutException):
        return f"no SSH session within {timeout_s:g} s"
    return f"SSH failed ({type(exc).__name__})"


def _connect(ep: Endpoint, device_type: str, **extra: Any) -> Any:
    """A netmiko session, or a FabricError that says why not (the password never in it)."""
    try:
        return ConnectHandler(device_type=device_type, host=ep.address, port=ep.port,
                              username=ep.username, password=ep.password.reveal(),
                              conn_timeout=ep.timeout_s, timeout=ep.timeout_s,
                              session_log=None, **extra)
    except NetmikoAuthenticationException:
        raise FabricError(f"{ep.hostname}: SSH login refused for user {ep.username}",
                          hint="check the switch credentials reference") from None
    except SSH_ERRORS as exc:
        raise FabricError(f"{ep.hostname}: cannot reach {ep.address}:{ep.port} over SSH: "
                          f"{reason(exc, ep.timeout_s)}",
                          hint="check management.address and port, and that the switch's "
                          "SSH server runs") from None


class NetmikoDriver:
    """One SSH session to one switch (IOS-style CLI dialects)."""

    def __init__(self, ep: Endpoint) -> None:
        dialect = DIALECTS.get(ep.nos)
        if dialect is None:
            raise FabricError(f"{ep.hostname}: push over CLI is not implemented for {ep.nos}",
                              hint="see docs/fabric.md for the supported dialects")
        self.ep, self.dialect = ep, dialect
        self.conn: Any = _connect(ep, dialect.device_type, secret=ep.password.reveal(),
                                  auto_connect=True)
        try:
            if not self.conn.check_enable_mode():
                self.conn.enable()
        except SSH_ERRORS as exc:
            raise FabricError(f"{ep.hostname}: cannot enter enable mode on {ep.address}: "
                              f"{reason(exc, ep.timeout_s)}") from None

    def running_config(self) -> str:
        return str(self.conn.send_command(self.dialect.show_running))

    def apply(self, commands: Sequence[str]) -> SentLines:
        """Send line by line, stop at the first refused one: exactly `applied` took effect
        (in a session: nothing took effect unless all were accepted and committed)."""
        if self.dialect.session:
            return self._apply_session(commands)
        applied: list[str] = []
        self.conn.config_mode()
        try:
            for line in commands:
                out = str(self.conn.send_config_set([line], exit_config_mode=False,
                                                    enter_config_mode=False))
                if ERROR_RE.search(out.split(line, 1)[-1]):
                    return SentLines(tuple(applied), line, _last_line(out, line))
                applied.append(line)
        finally:
            self._leave_config()
        return SentLines(tuple(applied))

    def _apply_session(self, commands: Sequence[str]) -> SentLines:
        self.conn.config_mode(config_command=f"configure session {SESSION}")
        try:
            for line in commands:
                out = str(self.conn.send_config_set([line], exit_config_mode=False,
                                                    enter_config_mode=False))
                if ERROR_RE.search(out.split(line, 1)[-1]):
                    self.conn.send_config_set(["abort"], exit_config_mode=False,
                                              enter_config_mode=False)
                    return SentLines((), line, _last_line(out, line) + "; session aborted")
            out = str(self.conn.send_config_set(["commit"], exit_config_mode=False,
                                                enter_config_mode=False))
            if ERROR_RE.search(out.split("commit", 1)[-1]):
                self.conn.send_config_set(["abort"], exit_config_mode=False,
                                          enter_config_mode=False)
                return SentLines((), "commit", _last_line(out, "commit") + "; session aborted")
        finally:
            self._leave_config()
        return SentLines(tuple(commands))

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


# NVUE (Cumulus) and SONiC are driven from their Linux shell (switches/staged.py).
SHELL_TYPES = {"cumulus": "cumulus_linux", "sonic": "linux"}
RC_MARK = "__provision_rc="
# base64 characters per line: the whole command stays under the 511 columns netmiko asks
# for, so the shell echoes it unwrapped (and under the tty's 4096-byte line limit)
CHUNK = 300


class NetmikoShell:
    """A login shell on an NVUE or SONiC switch: commands with their exit status, files."""

    def __init__(self, ep: Endpoint) -> None:
        self.ep = ep
        self.conn: Any = _connect(ep, SHELL_TYPES[ep.nos])

    def run(self, command: str) -> tuple[int, str]:
        out = str(self.conn.send_command(f"{command}; echo {RC_MARK}$?",
                                         read_timeout=max(self.ep.timeout_s, 120.0)))
        body, _, tail = out.rpartition(RC_MARK)
        digits = "".join(ch for ch in tail.strip()[:3] if ch.isdigit())
        return (int(digits) if digits else 255), body

    def put(self, path: str, text: str) -> None:
        data = base64.b64encode(text.encode()).decode()
        staging = f"{path}.b64"
        for cmd in [f": > {staging}"] + [f"echo {data[i:i + CHUNK]} >> {staging}"
                                          for i in range(0, len(data), CHUNK)] + [
                f"base64 -d {staging} > {path} && rm -f {staging}"]:
            rc, out = self.run(cmd)
            if rc != 0:
                raise FabricError(f"{self.ep.hostname}: writing {path} failed: "
                                  f"{out.strip()[-200:]}")

    def close(self) -> None:
        self.conn.disconnect()
