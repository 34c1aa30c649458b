"""A batch across the execution nodes: one share per node, all at once on the engine's
fan-out; a share whose node is lost runs once more on another node when the playbook is
safe to repeat, else its hosts fail with the reason. Every attempt is reported to
`record`, so the state store says which worker ran what. A node lost once is remembered
for the run (`lost`): the later batches and stages split over the others, instead of
losing each share's first attempt (a connect timeout or ~15 s of keepalives) to it again."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Collection, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import runner as runner_mod
from provisioner.errors import ExecutionError
from provisioner.execution import shares
from provisioner.execution.stream import run_share
from provisioner.fanout import fan_out
from provisioner.inventory.execution_models import Execution

# One failure domain for the hosts that must run in one ansible-playbook (the control
# planes: kubeadm's certificate upload re-encrypts the kubeadm-certs Secret under a new key
# each time, so control planes joining from two shares at once would race for it).
TOGETHER = "\x00together"


@dataclass
class Attempt:
    """One try of one share on one execution node."""

    worker: str
    hosts: list[str]
    result: runner_mod.RunResult | None = None
    lost: str | None = None  # why the node could not finish it


@dataclass
class ShareOutcome:
    """A share's attempts, the last one deciding its hosts' outcome."""

    hosts: list[str]
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def final(self) -> Attempt:
        return self.attempts[-1]


def stage_project(private_data_dir: Path) -> Path:
    """What transmit sends: the rendered project without its artifacts/ (earlier runs)."""
    stage = Path(tempfile.mkdtemp(prefix="transmit-", dir=private_data_dir.parent))
    shutil.copytree(private_data_dir, stage / "job", symlinks=True,
                    ignore=shutil.ignore_patterns("artifacts"))
    return stage / "job"


def run_batch(ex: Execution, rack_of: Mapping[str, str], private_data_dir: Path,
              playbook: str, batch: list[str], *, idempotent: bool, forks: int = 20,
              check: bool = False, on_event: runner_mod.EventFn | None = None,
              cancel: Callable[[], bool] | None = None,
              record: Callable[[Attempt, int], None] | None = None,
              on_spawn: Callable[[str, int], None] | None = None,
              together: Collection[str] = (),
              lost: MutableMapping[str, str] | None = None) -> list[ShareOutcome]:
    """Run `playbook` over `batch`, split by rack across `ex.nodes`; one outcome per share.
    The hosts in `together` share one worker whatever the split (the control planes).
    `lost` (node name -> why), shared by the caller across the run's batches: the nodes
    lost before are left out of the split while another is left; those lost now are
    added."""
    lost = {} if lost is None else lost
    domain = dict(rack_of) if ex.split_by == "rack" else {h: h for h in batch}
    domain.update({h: TOGETHER for h in together})
    live = [n for n in ex.nodes if n.name not in lost] or list(ex.nodes)
    split = shares.split(batch, domain, live)
    by_name = {n.name: n for n in ex.nodes}
    load = {name: len(hosts) for name, hosts in split.items()}
    dead: set[str] = {n.name for n in ex.nodes if n not in live}
    lock = threading.Lock()
    stage = stage_project(private_data_dir)

    def attempt(worker: str, hosts: list[str], number: int) -> Attempt:
        spawn = None if on_spawn is None else (lambda pid: on_spawn(worker, pid))
        try:
            result = run_share(by_name[worker], ex, stage, private_data_dir, playbook, hosts,
                               forks=forks, check=check, on_event=on_event, cancel=cancel,
                               on_spawn=spawn)
            done = Attempt(worker, hosts, result=result)
        except ExecutionError as exc:
            done = Attempt(worker, hosts, lost=exc.message)
        if record is not None:
            record(done, number)
        return done

    def work(worker: str) -> ShareOutcome:
        hosts = split[worker]
        out = ShareOutcome(hosts, [attempt(worker, hosts, 1)])
        if out.final.lost is None:
            return out
        with lock:
            dead.add(worker)
            lost[worker] = out.final.lost
            other = shares.fallback(worker, ex.nodes, dead, load)
            if other is not None:
                load[other.name] = load.get(other.name, 0) + len(hosts)
        if not idempotent or not ex.retry_lost or other is None:
            return out
        if cancel is not None and cancel():
            return out
        out.attempts.append(attempt(other.name, hosts, 2))
        if out.final.lost is not None:
            with lock:
                dead.add(other.name)
                lost[other.name] = out.final.lost
        return out

    try:
        done = fan_out(list(split), work, concurrency=len(split))
    finally:
        shutil.rmtree(stage.parent, ignore_errors=True)
    outcomes = []
    for d in done:
        if d.value is not None:
            outcomes.append(d.value)
        else:  # a bug in this module: the share's hosts fail with it, not silently
            outcomes.append(ShareOutcome(split[d.key], [Attempt(
                d.key, split[d.key], lost=f"unexpected {type(d.error).__name__}: {d.error}")]))
    return outcomes
