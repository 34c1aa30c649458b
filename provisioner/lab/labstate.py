"""What `lab up` records (lab.json): every process with its start time, the SSH hosts and
execution nodes, the switch stand-ins, and the `lab up` itself while it is starting."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from provisioner import pids
from provisioner.lab import hosts as hosts_mod
from provisioner.lab import switch as switch_mod


@dataclass
class LabProcess:
    role: str  # redfish | ipmi:<host> | proxy
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: tells a reused PID apart
    log: str

    def alive(self) -> bool:
        return pids.start_ticks(self.pid) == self.start_ticks


@dataclass
class LabState:
    site: str
    latency_ms: int
    processes: list[LabProcess] = field(default_factory=list)
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    ssh_hosts: list[hosts_mod.SshHost] = field(default_factory=list)
    ssh_tag: str = ""
    switches: list[switch_mod.LabSwitch] = field(default_factory=list)  # lab/switch.py
    notes: list[str] = field(default_factory=list)
    # provisioning.execution's nodes, as lab hosts (lab/execution.py)
    execution_hosts: list[hosts_mod.SshHost] = field(default_factory=list)
    mirror: dict[str, Any] = field(default_factory=dict)  # url, key_file, counts, build_s
    # [pid, start ticks] of the `lab up` still starting this lab; empty once it finished
    # (lab/orphans.py: a lab whose `up` died is no one's, `lab prune` ends it)
    starting: list[int] = field(default_factory=list)
    state_file: str = ""  # lab.json while `lab up` runs: each started process is saved

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def dead(self) -> list[str]:
        """What of the lab no longer runs: processes by role, hosts and switches by name."""
        out = [p.role for p in self.processes if not p.alive()]
        for kind, group in (("ssh host", self.ssh_hosts),
                            ("execution node", self.execution_hosts)):
            out += [f"{kind} {h.name}" for h in group
                    if pids.start_ticks(h.pid) != h.start_ticks]
        out += [f"switch {s.name}" for s in self.switches
                if (pids.start_ticks(s.zebra_pid), pids.start_ticks(s.ssh_pid))
                != (s.zebra_ticks, s.ssh_ticks)]
        return out

    def anything_runs(self) -> bool:
        """A process, host or switch of this lab still runs, or its `up` is starting it."""
        parts = len(self.processes) + len(self.ssh_hosts) + len(self.execution_hosts) \
            + len(self.switches)
        return len(self.dead()) < parts or (
            len(self.starting) == 2 and pids.start_ticks(self.starting[0]) == self.starting[1])

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LabState:
        return cls(site=data["site"], latency_ms=data.get("latency_ms", 0),
                   processes=[LabProcess(**p) for p in data.get("processes", [])],
                   endpoints=data.get("endpoints", {}),
                   ssh_hosts=[hosts_mod.SshHost(**h) for h in data.get("ssh_hosts", [])],
                   ssh_tag=data.get("ssh_tag", ""),
                   switches=[switch_mod.LabSwitch(**s) for s in data.get("switches", [])],
                   notes=data.get("notes", []),
                   execution_hosts=[hosts_mod.SshHost(**h)
                                    for h in data.get("execution_hosts", [])],
                   mirror=data.get("mirror", {}), starting=data.get("starting", []))
