"""Is each execution node fit to run the controller's jobs: SSH, versions, free disk.

One SSH call per node (all nodes at once, on the engine's fan-out) runs a short script
that prints ansible-runner's version, ansible-core's, and the free space of the node's
work directory. Compatible means the same major.minor as the controller's: the
transmit/worker/process stream changes between ansible-runner minor releases (2.1 added
keepalives the older worker refuses: ansible_runner/streaming.py strips the key for
them), and the roles are linted and tested with the controller's ansible-core.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

from provisioner.execution.stream import SYSTEM_PATH, ssh_argv
from provisioner.fanout import fan_out
from provisioner.inventory.execution_models import Execution, ExecutionNode

# Markers the script prints before each answer, so a login banner cannot be misread.
_RUNNER, _CORE, _DISK = "@@runner ", "@@core ", "@@disk "


@dataclass(frozen=True)
class Versions:
    ansible_runner: str
    ansible_core: str


@dataclass
class NodeHealth:
    node: str
    address: str
    reachable: bool = False
    ansible_runner: str | None = None
    ansible_core: str | None = None
    free_mb: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reachable and not self.problems


def controller_versions() -> Versions:
    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "missing"
    return Versions(v("ansible-runner"), v("ansible-core"))


def _script(node: ExecutionNode) -> str:
    runner = node.ansible_runner
    path = (posixpath.dirname(runner) + ":" if "/" in runner else "") + SYSTEM_PATH
    wd = shlex.quote(node.work_dir)
    return (f"PATH={shlex.quote(path)}; export PATH; "
            f"echo {_RUNNER}$({shlex.quote(runner)} --version 2>&1 | tail -n 1); "
            f"echo {_CORE}$(ansible-playbook --version 2>&1 | head -n 1); "
            f"mkdir -p {wd} && echo {_DISK}$(df -Pk {wd} | tail -n 1)")


def _minor(v: str | None) -> tuple[str, ...]:
    return tuple((v or "").split(".")[:2])


def check_node(node: ExecutionNode, ex: Execution, controller: Versions,
               timeout_s: float = 60.0) -> NodeHealth:
    """One node's health; every problem is a sentence naming what to fix."""
    out = NodeHealth(node.name, node.address)
    argv = ssh_argv(node, ex, _script(node))
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        out.problems.append(f"no answer over SSH in {timeout_s:g} s")
        return out
    if proc.returncode == 255:  # ssh's own failure: connect, host key, authentication
        why = " ".join(proc.stderr.split())[-300:] or "ssh exited 255"
        out.problems.append(f"SSH to {node.user}@{node.address}:{node.port} failed: {why}")
        return out
    out.reachable = True
    lines = proc.stdout.splitlines()

    def answer(marker: str) -> str:
        return next((ln[len(marker):].strip() for ln in lines if ln.startswith(marker)), "")

    runner_v = re.search(r"\b(\d+\.\d+\.\d+)\b", answer(_RUNNER))
    core_v = re.search(r"\[core (\d+\.\d+\.\d+)", answer(_CORE))
    out.ansible_runner = runner_v.group(1) if runner_v else None
    out.ansible_core = core_v.group(1) if core_v else None
    if out.ansible_runner is None:
        out.problems.append(f"ansible-runner not found as {node.ansible_runner!r} "
                            f"(pip install 'ansible-runner=={controller.ansible_runner}')")
    elif _minor(out.ansible_runner) != _minor(controller.ansible_runner):
        out.problems.append(f"ansible-runner {out.ansible_runner} here, "
                            f"{controller.ansible_runner} on the controller: the same "
                            "major.minor is needed for the job stream")
    if out.ansible_core is None:
        out.problems.append("ansible-playbook not found beside ansible-runner or on PATH "
                            f"(pip install 'ansible-core=={controller.ansible_core}')")
    elif _minor(out.ansible_core) != _minor(controller.ansible_core):
        out.problems.append(f"ansible-core {out.ansible_core} here, "
                            f"{controller.ansible_core} on the controller: the roles are "
                            "tested with the controller's major.minor")
    disk = answer(_DISK).split()
    if len(disk) >= 4 and disk[3].isdigit():
        out.free_mb = int(disk[3]) // 1024
        if out.free_mb < ex.min_free_mb:
            out.problems.append(f"{out.free_mb} MB free in {node.work_dir}, "
                                f"{ex.min_free_mb} MB needed (min_free_mb)")
    else:
        out.problems.append(f"cannot create or measure {node.work_dir}: "
                            + (" ".join(proc.stderr.split())[-200:] or "no df output"))
    return out


def check(ex: Execution, controller: Versions | None = None) -> list[NodeHealth]:
    """Every execution node's health, in inventory order, checked at once."""
    ctl = controller or controller_versions()
    nodes = {n.name: n for n in ex.nodes}
    done = fan_out(list(nodes), lambda name: check_node(nodes[name], ex, ctl),
                   concurrency=max(1, min(32, len(nodes))))
    out = []
    for d in done:
        if d.value is not None:
            out.append(d.value)
        else:
            n = nodes[d.key]
            out.append(NodeHealth(n.name, n.address, problems=[
                f"check failed: {type(d.error).__name__}: {d.error}"]))
    return out
