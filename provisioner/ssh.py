"""The SSH edge: a session on a node with the site's login, one command at a time, and why
there is none. paramiko stays here (and in switches/, behind netmiko), imported when a
session is opened, so commands that never log in to a node do not pay for it.

Host keys: in the lab any host key is accepted (the test hosts are made fresh each time);
on a real site only the keys in the system's and the user's known_hosts and in the site's
(.provision/known_hosts: the host keys `pxe render` generated into the autoinstall data)
are, never silently added.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from provisioner import lazy
from provisioner.inventory.loader import LoadedSite
from provisioner.profile import Profile
from provisioner.state.dir import location

if TYPE_CHECKING:
    import paramiko  # type: ignore[import-untyped]  # no stubs; a netmiko dependency


@dataclass(frozen=True)
class Login:
    user: str
    port: int
    key_file: str | None
    accept_any_host_key: bool  # the lab only
    known_hosts: str | None = None  # the site's, written by `pxe render` (host keys it made)


def login_for(loaded: LoadedSite, profile: Profile) -> Login:
    """The site's login (`site.ssh`), the lab's any-host-key rule, the site's known_hosts."""
    ssh = loaded.site.site.ssh
    key = None
    if ssh.private_key_file:
        key = str((loaded.base_dir / ssh.private_key_file).expanduser())
    site_known = location(loaded.base_dir) / "known_hosts"
    return Login(user=ssh.user, port=ssh.port, key_file=key, accept_any_host_key=profile.lab,
                 known_hosts=str(site_known) if site_known.is_file() else None)


class Refusal(enum.Enum):
    HOST_KEY_MISMATCH = "host-key-mismatch"
    HOST_KEY_UNKNOWN = "host-key-unknown"
    KEY_REFUSED = "key-refused"  # SSH answers, but not to the site's key
    SILENT = "silent"  # nothing answers SSH there


class NoSession(Exception):
    """No session: why (a Refusal) and one line for the operator."""

    def __init__(self, refusal: Refusal, detail: str) -> None:
        super().__init__(detail)
        self.refusal, self.detail = refusal, detail


class CommandFailed(Exception):
    """The session broke while a command ran."""


def connect(client: paramiko.SSHClient, address: str, login: Login, timeout_s: float) -> None:
    """Log `client` in with the site's login: host keys from the site's known_hosts, the
    user's and the system's; anything else is refused (the lab alone accepts any key).
    Every SSH session to a node goes through here."""
    paramiko = lazy.module("paramiko")

    if login.accept_any_host_key:
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # the lab alone
    else:
        client.load_system_host_keys()
        user_known = Path("~/.ssh/known_hosts").expanduser()
        if user_known.exists():
            client.load_host_keys(str(user_known))
        if login.known_hosts:
            client.load_host_keys(login.known_hosts)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(address, port=login.port, username=login.user,
                   key_filename=login.key_file, look_for_keys=login.key_file is None,
                   allow_agent=login.key_file is None, timeout=timeout_s,
                   banner_timeout=timeout_s, auth_timeout=timeout_s)


class Session:
    """A logged-in session; `run` one command at a time; closed on leaving `with`."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def run(self, command: str, timeout_s: float) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of one command, at most 4 KiB of each."""
        paramiko = lazy.module("paramiko")

        try:
            _, stdout, stderr = self._client.exec_command(command, timeout=timeout_s)
            out = stdout.read(4096).decode(errors="replace").strip()
            err = stderr.read(4096).decode(errors="replace").strip()
            return stdout.channel.recv_exit_status(), out, err
        except (paramiko.SSHException, OSError) as exc:
            raise CommandFailed(str(exc)) from None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def open_session(address: str, login: Login, timeout_s: float) -> Session:
    """A logged-in session, or NoSession saying why there is none."""
    paramiko = lazy.module("paramiko")

    where = f"{address}:{login.port}"
    client = paramiko.SSHClient()
    try:
        connect(client, address, login, timeout_s)
    except paramiko.BadHostKeyException:
        client.close()
        raise NoSession(Refusal.HOST_KEY_MISMATCH, f"{where} answers SSH with a host key "
                        "that does not match known_hosts") from None
    except paramiko.SSHException as exc:
        client.close()
        if "not found in known_hosts" in str(exc):
            raise NoSession(Refusal.HOST_KEY_UNKNOWN, f"{where} answers SSH but its host key "
                            "is not in known_hosts (add it, or name the node with "
                            "--reinstall)") from None
        if isinstance(exc, paramiko.AuthenticationException):
            raise NoSession(Refusal.KEY_REFUSED, f"{where} answers SSH but refuses the "
                            f"site's key for {login.user}") from None
        raise NoSession(Refusal.SILENT, f"no SSH answer from {where} ({exc})") from None
    except (OSError, EOFError) as exc:
        client.close()
        raise NoSession(Refusal.SILENT, f"no SSH answer from {where} ({exc})") from None
    return Session(client)
