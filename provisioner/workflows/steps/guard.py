"""Is this node already installed? Asked before any power-off or boot override (steps.bmc.Boot)
and polled by wait_os (steps.os.WaitOs).

A node answers as installed when an SSH login with the site's key (`site.ssh`: user, port,
private_key_file; in the lab, the lab's key through the lab overlay) succeeds and the
install marker is there: MARKER, written by the autoinstall late-commands
(render/pxe.py: `echo <hostname> > /target/etc/provisioner-installed`) and by the lab when
it creates an SSH test host (lab/hosts.py). A bare SSH banner proves nothing: the Ubuntu
live installer runs sshd on the same address.

Host keys: in the lab any host key is accepted (the test hosts are made fresh each time);
on a real site only the keys in the system and the user's known_hosts are, never silently
added. A real node whose host key is not known answers UNVERIFIED: the guard refuses it
(it cannot tell), wait_os keeps waiting and says why at its timeout.

Not implemented: asking the Kubernetes API whether the node is a Ready member (there is no
API client in the tool yet); the SSH marker is the only evidence.
"""

from __future__ import annotations

import enum
import shlex
from dataclasses import dataclass
from pathlib import Path

import paramiko  # type: ignore[import-untyped]  # no stubs; a netmiko dependency

from provisioner.inventory.loader import LoadedSite
from provisioner.profile import Profile

MARKER = "/etc/provisioner-installed"


class State(enum.Enum):
    SILENT = "silent"  # nothing answers SSH there
    NOT_INSTALLED = "not_installed"  # SSH answers, but not as a node installed by us
    UNVERIFIED = "unverified"  # SSH answers with a host key we may not trust
    INSTALLED = "installed"  # logged in with the site's key and read the marker


@dataclass(frozen=True)
class Answer:
    state: State
    detail: str  # one line for the operator

    @property
    def installed(self) -> bool:
        return self.state is State.INSTALLED


@dataclass(frozen=True)
class Login:
    user: str
    port: int
    key_file: str | None
    accept_any_host_key: bool  # the lab only


def login_for(loaded: LoadedSite, profile: Profile) -> Login:
    ssh = loaded.site.site.ssh
    key = None
    if ssh.private_key_file:
        key = str((loaded.base_dir / ssh.private_key_file).expanduser())
    return Login(user=ssh.user, port=ssh.port, key_file=key, accept_any_host_key=profile.lab)


def check_installed(address: str, login: Login, timeout_s: float = 5.0) -> Answer:
    """One attempt: log in on address with the site's key and read MARKER."""
    where = f"{address}:{login.port}"
    client = paramiko.SSHClient()
    if login.accept_any_host_key:
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # noqa: S507 - the lab
    else:
        client.load_system_host_keys()
        user_known = Path("~/.ssh/known_hosts").expanduser()
        if user_known.exists():
            client.load_host_keys(str(user_known))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        try:
            client.connect(address, port=login.port, username=login.user,
                           key_filename=login.key_file, look_for_keys=login.key_file is None,
                           allow_agent=login.key_file is None, timeout=timeout_s,
                           banner_timeout=timeout_s, auth_timeout=timeout_s)
        except paramiko.BadHostKeyException:
            return Answer(State.UNVERIFIED, f"{where} answers SSH with a host key that does "
                          "not match known_hosts")
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                return Answer(State.UNVERIFIED, f"{where} answers SSH but its host key is "
                              "not in known_hosts (add it, or name the node with --reinstall)")
            if isinstance(exc, paramiko.AuthenticationException):
                return Answer(State.NOT_INSTALLED, f"{where} answers SSH but refuses the "
                              f"site's key for {login.user}")
            return Answer(State.SILENT, f"no SSH answer from {where} ({exc})")
        except (OSError, EOFError) as exc:
            return Answer(State.SILENT, f"no SSH answer from {where} ({exc})")
        try:
            _, stdout, _ = client.exec_command(f"cat {shlex.quote(MARKER)}", timeout=timeout_s)
            text = stdout.read(4096).decode(errors="replace").strip()
            code = stdout.channel.recv_exit_status()
        except (paramiko.SSHException, OSError) as exc:
            return Answer(State.NOT_INSTALLED, f"logged in on {where} but could not read "
                          f"{MARKER} ({exc})")
        if code != 0:
            return Answer(State.NOT_INSTALLED, f"logged in on {where}; no install marker "
                          f"{MARKER}")
        first = text.splitlines()[0] if text else ""
        return Answer(State.INSTALLED, f"installed (marker {MARKER}: {first or 'empty'}) "
                      f"and answering on {where}")
    finally:
        client.close()
