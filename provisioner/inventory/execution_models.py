"""`provisioning.execution`: the hosts that run Ansible for the controller.

Each execution node is reached over SSH and runs `ansible-runner worker` on the job the
controller streams to it (ansible-runner's transmit/worker/process protocol, the one AWX
execution nodes speak through Receptor). Without nodes, playbooks run on the controller.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from provisioner.inventory.fields import Host, LocalPath, Model, Name

# A command path on the execution node: it reaches a remote shell, so no shell syntax.
RemotePath = Annotated[str, Field(pattern=r"^[A-Za-z0-9_./+-]{1,1024}$")]


class ExecutionNode(Model):
    """One execution node, and how the controller reaches it over SSH (key path only)."""

    name: Name
    address: Host  # an IP address or DNS name
    user: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")] = "root"
    port: int = Field(default=22, ge=1, le=65535)
    private_key_file: LocalPath | None = Field(
        default=None, description="controller's key for this node (else ssh's defaults)")
    known_hosts_file: LocalPath | None = Field(
        default=None, description="its host key (else ~/.ssh/known_hosts; always checked)")
    ansible_runner: RemotePath = Field(
        default="ansible-runner",
        description="ansible-runner on the node; its directory is put first on PATH, so "
        "the ansible-playbook beside it runs")
    work_dir: RemotePath = Field(default=".provisioner/runner",
                                 description="where the worker unpacks each job "
                                 "(relative: the SSH user's home)")
    racks: tuple[Name, ...] = Field(
        default=(), description="racks pinned to this node; others are shared by load")


class Execution(Model):
    """Execution nodes, and what happens to a share whose node is lost."""

    nodes: tuple[ExecutionNode, ...] = ()
    # The failure domain a share never splits: a rack (default), or each host on its own
    # (a site of one rack that still wants several execution nodes).
    split_by: Literal["rack", "host"] = "rack"
    # A lost node's hosts run once more on another node when the playbook is idempotent.
    retry_lost: bool = True
    # doctor: the least free space in work_dir for a job's project and artifacts.
    min_free_mb: int = Field(default=1024, ge=0)
    connect_timeout_s: int = Field(default=10, ge=1, le=600)

    @model_validator(mode="after")
    def _unique(self) -> Execution:
        names = [n.name for n in self.nodes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"execution node names must be unique: {', '.join(dup)}")
        pinned = [r for n in self.nodes for r in n.racks]
        twice = sorted({r for r in pinned if pinned.count(r) > 1})
        if twice:
            raise ValueError(f"racks pinned to two execution nodes: {', '.join(twice)}")
        return self
