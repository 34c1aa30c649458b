"""Is this node already installed? Asked before any power-off or boot override (steps.bmc.Boot)
and polled by wait_os (steps.os.WaitOs).

A node answers as installed when an SSH login with the site's key (`site.ssh`: user, port,
private_key_file; in the lab, the lab's key through the lab overlay) succeeds and the
install marker is there: install.MARKER, written by the autoinstall late-commands
(render/autoinstall.py: the host name and the boot token of the run that booted it) and by
the lab when it creates an SSH test host (lab/hosts.py). A bare SSH banner proves nothing:
the Ubuntu live installer runs sshd on the same address.

Host keys are the SSH edge's rule (provisioner/ssh.py); a real node whose host key is not
known answers UNVERIFIED: the guard refuses it (it cannot tell), wait_os keeps waiting and
says why at its timeout. This module keeps only the decision; the session is ssh.py's.

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

from provisioner import install, ssh

MARKER = install.MARKER
KUBECONFIG = "/etc/kubernetes/admin.conf"  # kubeadm's admin kubeconfig on a control plane


class State(enum.Enum):
    SILENT = "silent"  # nothing answers SSH there
    NOT_INSTALLED = "not_installed"  # SSH answers, but not as a node installed by us
    UNVERIFIED = "unverified"  # SSH answers with a host key we may not trust
    INSTALLED = "installed"  # logged in with the site's key and read the marker
    UNSUPPORTED = "unsupported"  # logged in (a node to adopt): an OS the site cannot take


@dataclass(frozen=True)
class Answer:
    state: State
    detail: str  # one line for the operator

    @property
    def installed(self) -> bool:
        return self.state is State.INSTALLED


Login = ssh.Login  # the site's login, as the SSH edge takes it


login_for = ssh.login_for  # the site's login (ssh.py), as every guard caller asks for it


# What a refused session means for "is it installed?".
_STATE = {ssh.Refusal.HOST_KEY_MISMATCH: State.UNVERIFIED,
          ssh.Refusal.HOST_KEY_UNKNOWN: State.UNVERIFIED,
          ssh.Refusal.KEY_REFUSED: State.NOT_INSTALLED, ssh.Refusal.SILENT: State.SILENT}


def check_installed(address: str, login: Login, timeout_s: float = 5.0) -> Answer:
    """One attempt: log in on address with the site's key and read MARKER."""
    where = f"{address}:{login.port}"
    try:
        session = ssh.open_session(address, login, timeout_s)
    except ssh.NoSession as no:
        return Answer(_STATE[no.refusal], no.detail)
    with session:
        try:
            code, text, _ = session.run(f"cat {shlex.quote(MARKER)}", timeout_s)
        except ssh.CommandFailed as exc:
            return Answer(State.NOT_INSTALLED, f"logged in on {where} but could not read "
                          f"{MARKER} ({exc})")
    if code != 0:
        return Answer(State.NOT_INSTALLED, f"logged in on {where}; no install marker "
                      f"{MARKER}")
    first = text.splitlines()[0] if text else ""
    return Answer(State.INSTALLED, f"installed (marker {MARKER}: {first or 'empty'}) "
                  f"and answering on {where}")


# What an adopted node's OS says it is: /etc/os-release's ID and VERSION_ID, then the first
# line of /etc/dgx-release where DGX OS wrote one (NVIDIA DGX OS user guide).
RELEASE_COMMAND = ('. /etc/os-release && echo "$ID $VERSION_ID"; '
                   "head -n1 /etc/dgx-release 2>/dev/null || true")


def check_adoptable(address: str, login: Login, hostname: str, version: str | None,
                    timeout_s: float = 5.0) -> Answer:
    """One attempt at a node `up --adopt` takes as installed (a factory DGX OS): a login
    with the site's key, its OS release read (Ubuntu `version`, the release software.os
    installs; None: not compared, said in the detail), and the marker written where there
    is none (`<host> adopted`), so that every later guard sees an installed node."""
    where = f"{address}:{login.port}"
    try:
        session = ssh.open_session(address, login, timeout_s)
    except ssh.NoSession as no:
        return Answer(_STATE[no.refusal], no.detail)
    sudo = "" if login.user == "root" else "sudo -n "
    mark = f"test -e {MARKER} || echo {shlex.quote(hostname)} adopted > {MARKER}; cat {MARKER}"
    with session:
        try:
            code, text, err = session.run(RELEASE_COMMAND, timeout_s)
            lines = text.splitlines()
            ident = lines[0].split() if lines else []
            if code != 0 or len(ident) != 2:
                return Answer(State.UNSUPPORTED, f"logged in on {where}; no OS release in "
                              f"/etc/os-release ({err or text or 'empty'})")
            os_id, os_version = ident
            dgx = lines[1] if len(lines) > 1 else ""
            said = f"{os_id} {os_version}" + (f", {dgx}" if dgx else "")
            if version is not None and (os_id, os_version) != ("ubuntu", version):
                return Answer(State.UNSUPPORTED, f"runs {said}; the site's software.os "
                              f"installs Ubuntu {version}: not adopted")
            code, marker, err = session.run(f"{sudo}sh -c {shlex.quote(mark)}", timeout_s)
        except ssh.CommandFailed as exc:
            return Answer(State.NOT_INSTALLED, f"logged in on {where} but could not read its "
                          f"OS release or write {MARKER} ({exc})")
    if code != 0:
        return Answer(State.UNSUPPORTED, f"runs {said}; could not write {MARKER} ({err})")
    compared = "" if version is not None else " (release not compared)"
    return Answer(State.INSTALLED, f"adopted: runs {said}{compared}, marker "
                  f"{marker.splitlines()[0] if marker else ''!r}, answering on {where}")


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
        try:
            with ssh.open_session(address, login, timeout_s) as session:
                code, out, err = session.run(ready_command(node, login), timeout_s)
        except (ssh.NoSession, ssh.CommandFailed) as exc:
            tried.append(f"{name}: {exc}")
            continue
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
