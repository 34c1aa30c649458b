"""How much of the controller does a playbook cost, run locally versus across two
execution nodes?

Starts the lab for a generated site of N SSH lab hosts (default 50) plus two execution
nodes (lab/execution.py), then runs the same playbook over all N hosts twice, each in a
fresh controller process: locally (ansible-runner -> ansible-playbook as the controller's
child), and split across the two execution nodes (transmit -> ssh worker -> process).
Printed, measured side by side in this one run:

- controller CPU seconds: user + system of the controller process and every process it
  waited for (ansible-playbook and its forks locally; the ssh clients remotely), from the
  kernel's accounting (getrusage RUSAGE_CHILDREN); the execution nodes' worker and
  ansible-playbook are not the controller's children and are not counted;
- per managed host, and the ratio remote/local (goal: <= 0.25);
- wall time, for information only: on this 2-core machine the execution nodes' work runs
  on the same two cores as the controller, so wall time cannot show a speed-up.

    python bench/execution_scale.py [--hosts 50] [--playbook ping.yml] [--forks 50] [--smoke]

--smoke: 2 hosts, to see that the bench still runs end to end (its ratio means nothing).

Needs root (network namespaces) and the lab's packages (scripts/bootstrap.sh). Takes the
lab lock's place: run it under `flock /tmp/pv-lab.lock`.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from up_scale import site_yaml  # bench/ is sys.path[0]: the same generated site

from provisioner import lab as lab_mod
from provisioner.lab.overlay import load  # the site with the running lab's endpoints

EXECUTION = """provisioning:
  execution:
    split_by: host
    nodes:
      - {name: ex1, address: 10.248.0.201}
      - {name: ex2, address: 10.248.0.202}
"""

CHILD = """
import json, resource, sys
from pathlib import Path
from provisioner import render, runner
from provisioner.execution import dispatch
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
mode, site, playbook, forks = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
loaded = load(site)
out = render.render(loaded, loaded.base_dir / ".provision" / "ansible", lab=True).out
from provisioner.inventory.topology import servers
hosts = sorted(p.hostname for p in servers(loaded))
def cpu():
    s, c = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
cpu0 = cpu()
if mode == "local":
    r = runner.run_playbook(out, playbook, limit=",".join(hosts), forks=forks)
    results = [r]
else:
    outs = dispatch.run_batch(loaded.site.provisioning.execution, {}, out, playbook, hosts,
                              idempotent=True, forks=forks)
    results = [o.final.result for o in outs]
run_cpu_s = cpu() - cpu0
ok = sum(1 for r in results if r is not None for s in r.hosts.values()
         if s.ok and not s.failed and not s.unreachable)
print(json.dumps({"ok_hosts": ok, "hosts": len(hosts), "run_cpu_s": run_cpu_s}))
"""


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(mode: str, site: Path, playbook: str, forks: int) -> dict[str, float]:
    """One controller process: its CPU seconds (with all it waited for), wall seconds."""
    cpu0, t0 = children_cpu_s(), time.monotonic()
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(site), playbook,
                           str(forks)], capture_output=True, text=True, check=False)
    wall, cpu = time.monotonic() - t0, children_cpu_s() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"{mode} run failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    if doc["ok_hosts"] != doc["hosts"]:
        raise SystemExit(f"{mode} run: only {doc['ok_hosts']} of {doc['hosts']} hosts ok")
    return {"cpu_s": cpu, "run_cpu_s": doc["run_cpu_s"], "wall_s": wall,
            "hosts": doc["hosts"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--playbook", default="ping.yml")
    ap.add_argument("--forks", type=int, default=50)
    ap.add_argument("--smoke", action="store_true", help="2 hosts only")
    args = ap.parse_args()
    if args.smoke:
        args.hosts = 2
    with tempfile.TemporaryDirectory(prefix="execscale-") as tmp:
        site = Path(tmp) / "site"
        site.mkdir()
        (site / "site.yaml").write_text(site_yaml(args.hosts) + EXECUTION)
        loaded = load(site)
        state = lab_mod.up(loaded, ssh_hosts=True, start_timeout_s=180)
        for note in state.notes:
            print(f"lab: {note}", flush=True)
        try:
            local = measure("local", site, args.playbook, args.forks)
            remote = measure("remote", site, args.playbook, args.forks)
        finally:
            lab_mod.down(loaded)
    n = local["hosts"]
    print(f"{args.playbook} over {n} lab hosts, forks {args.forks}; controller CPU = "
          "user+sys of the controller process and its waited-for children")
    print("(playbook: the run alone; process: with start-up, load and render)")
    print(f"{'run':<24} {'playbook CPU s':>15} {'ms/host':>8} {'process CPU s':>14} "
          f"{'wall s':>7}")
    for name, r in (("local (one controller)", local),
                    ("two execution nodes", remote)):
        print(f"{name:<24} {r['run_cpu_s']:>15.2f} {r['run_cpu_s'] / n * 1000:>8.1f} "
              f"{r['cpu_s']:>14.2f} {r['wall_s']:>7.2f}")
    print(f"controller CPU for the playbook, remote/local = "
          f"{remote['run_cpu_s'] / local['run_cpu_s']:.2f} (goal <= 0.25); whole process "
          f"{remote['cpu_s'] / local['cpu_s']:.2f}. Wall time shows no speed-up here: the "
          "execution nodes share this machine's 2 cores with the controller")


if __name__ == "__main__":
    main()
