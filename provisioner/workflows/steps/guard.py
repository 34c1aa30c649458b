"""Is this node already installed? Asked before any power-off or boot override (steps.bmc.Boot)
and polled by wait_os (steps.os.WaitOs).

A node answers as installed when an SSH login with the site's key (`site.ssh`: user, port,
private_key_file; in the lab, the lab's key through the lab overlay) succeeds and the
install marker is there: MARKER, written by the autoinstall late-commands
(render/pxe.py: `echo <hostname> > /target/etc/provisioner-installed`) and by the lab when
it creates an SSH test host (lab/hosts.py). A bare SSH banner proves nothing: the Ubuntu
live installer runs sshd on the same address.

Host keys: in the lab any host key is accepted (the test hosts are made fresh each time);
on a real site only the keys in the system's and the user's known_hosts and in the site's
(.provision/known_hosts: the host keys `pxe render` generated into the autoinstall data)
are, never silently added. A real node whose host key is not known answers UNVERIFIED: the
guard refuses it (it cannot tell), wait_os keeps waiting and says why at its timeout.

A node is also installed when the cluster says it is a member (ask_cluster): the tool
keeps no kubeconfig of its own, so it asks a control plane over the same SSH login with the
kubeconfig `up` left there (kubeadm's /etc/kubernetes/admin.conf, roles/kubernetes). A
member is refused whether Ready or not (a NotReady member may be rebooting; --reinstall
names it). With no control plane answering (before the cluster exists, and always in the
lab, which has no API server) the answer says so and the SSH marker decides alone.
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko  # type: ignore[import-untyped]  # no stubs; a netmiko dependency

from provisioner.inventory.loader import LoadedSite
from provisioner.profile import Profile
from provisioner.statedir import location

MARKER = "/etc/provisioner-installed"
KUBECONFIG = "/etc/kubernetes/admin.conf"  # kubeadm's admin kubeconfig on a control plane


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
    known_hosts: str | None = None  # the site's, written by `pxe render` (host keys it made)


def login_for(loaded: LoadedSite, profile: Profile) -> Login:
    ssh = loaded.site.site.ssh
    key = None
    if ssh.private_key_file:
        key = str((loaded.base_dir / ssh.private_key_file).expanduser())
    site_known = location(loaded.base_dir) / "known_hosts"
    return Login(user=ssh.user, port=ssh.port, key_file=key, accept_any_host_key=profile.lab,
                 known_hosts=str(site_known) if site_known.is_file() else None)


def connect(client: paramiko.SSHClient, address: str, login: Login, timeout_s: float) -> None:
    """Log `client` in with the site's login. Host keys: the site's known_hosts (the keys
    `pxe render` made), the user's and the system's; anything else is refused (the lab
    alone accepts any key). Every SSH session to a node goes through here."""
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


def _open(address: str, login: Login, timeout_s: float) -> paramiko.SSHClient | Answer:
    """A logged-in client, or the Answer that says why there is none."""
    where = f"{address}:{login.port}"
    client = paramiko.SSHClient()
    try:
        connect(client, address, login, timeout_s)
    except paramiko.BadHostKeyException:
        client.close()
        return Answer(State.UNVERIFIED, f"{where} answers SSH with a host key that does "
                      "not match known_hosts")
    except paramiko.SSHException as exc:
        client.close()
        if "not found in known_hosts" in str(exc):
            return Answer(State.UNVERIFIED, f"{where} answers SSH but its host key is "
                          "not in known_hosts (add it, or name the node with --reinstall)")
        if isinstance(exc, paramiko.AuthenticationException):
            return Answer(State.NOT_INSTALLED, f"{where} answers SSH but refuses the "
                          f"site's key for {login.user}")
        return Answer(State.SILENT, f"no SSH answer from {where} ({exc})")
    except (OSError, EOFError) as exc:
        client.close()
        return Answer(State.SILENT, f"no SSH answer from {where} ({exc})")
    return client


def _exec(client: paramiko.SSHClient, command: str, timeout_s: float) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one command, at most 4 KiB of each."""
    _, stdout, stderr = client.exec_command(command, timeout=timeout_s)
    out = stdout.read(4096).decode(errors="replace").strip()
    err = stderr.read(4096).decode(errors="replace").strip()
    return stdout.channel.recv_exit_status(), out, err


def check_installed(address: str, login: Login, timeout_s: float = 5.0) -> Answer:
    """One attempt: log in on address with the site's key and read MARKER."""
    where = f"{address}:{login.port}"
    client = _open(address, login, timeout_s)
    if isinstance(client, Answer):
        return client
    try:
        try:
            code, text, _ = _exec(client, f"cat {shlex.quote(MARKER)}", timeout_s)
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


class Membership(enum.Enum):
    READY = "ready"  # a member whose Ready condition is True
    NOT_READY = "not_ready"  # a member, Ready False or Unknown
    ABSENT = "absent"  # the cluster answered: no node of that name
    UNREACHABLE = "unreachable"  # no control plane answered (no cluster yet, or the lab)


@dataclass(frozen=True)
class ClusterAnswer:
    membership: Membership
    detail: str


def ready_command(node: str, login: Login) -> str:
    """kubectl on a control plane: the node's Ready condition status (True/False/Unknown)."""
    sudo = "" if login.user == "root" else "sudo -n "
    path = '{.status.conditions[?(@.type=="Ready")].status}'
    return (f"{sudo}kubectl --kubeconfig {KUBECONFIG} get node {shlex.quote(node)} "
            f"-o jsonpath={shlex.quote(path)}")


def ask_cluster(node: str, control_planes: Sequence[tuple[str, str]], login: Login,
                timeout_s: float = 5.0) -> ClusterAnswer:
    """Is `node` a member of the site's cluster? Asks each control plane ((name, address),
    the node itself last) until one answers with kubectl."""
    tried: list[str] = []
    for name, address in control_planes:
        client = _open(address, login, timeout_s)
        if isinstance(client, Answer):
            tried.append(f"{name}: {client.detail}")
            continue
        try:
            code, out, err = _exec(client, ready_command(node, login), timeout_s)
        except (paramiko.SSHException, OSError) as exc:
            tried.append(f"{name}: {exc}")
            continue
        finally:
            client.close()
        if code == 0:
            state = Membership.READY if out == "True" else Membership.NOT_READY
            return ClusterAnswer(state, f"the cluster (asked on {name}) has node {node}, "
                                 f"Ready={out or 'unknown'}")
        if "NotFound" in err:  # Error from server (NotFound): nodes "x" not found
            return ClusterAnswer(Membership.ABSENT, f"the cluster (asked on {name}) has no "
                                 f"node {node}")
        tried.append(f"{name}: kubectl exit {code}: {err.splitlines()[-1] if err else ''}")
    return ClusterAnswer(Membership.UNREACHABLE, "no cluster reachable ("
                         + ("; ".join(tried) if tried else "no control plane") + ")")


def decide(ssh: Answer, cluster: ClusterAnswer | None) -> Answer:
    """One verdict from the SSH marker and the cluster: a member is installed (refused unless
    named), whatever SSH says; otherwise the SSH answer stands, saying what the cluster said."""
    if cluster is None:
        return ssh
    if cluster.membership in (Membership.READY, Membership.NOT_READY):
        return Answer(State.INSTALLED, f"a Kubernetes node: {cluster.detail} ({ssh.detail})")
    relies = ("relying on the SSH install marker"
              if cluster.membership is Membership.UNREACHABLE else "not a member")
    return Answer(ssh.state, f"{ssh.detail}; {cluster.detail}, {relies}")
