"""Does `provision up` for 50 nodes cost about as much as for one?

For N = 1, 10 and 50 lab nodes (generated sites of IPMI nodes: ipmi_sim applies power
changes at once, so the time is the tool's and Ansible's, not an emulator's random delay),
starts the lab with an SSH test host per node, runs `provision up` from nothing with the
Ansible phase limited to the trivial ping.yml (for configure and verify), and prints,
measured side by side in this one run:

- T(N): wall time of the whole `provision up` process (start to exit);
- time inside ansible-runner, and the tool's own time outside it, per node;
- T(50)/T(1) (goal <= 3).

    python bench/up_scale.py [--sizes 1,10,50] [--forks 50] [--smoke]

--smoke: sizes 1 and 2 only, to see that the bench still runs end to end. At 50 hosts
`lab up` raises fs.inotify.max_user_instances when the machine's is too low (as root;
lab/limits.py) and says so. Needs root (network namespaces) and the lab's packages
(scripts/bootstrap.sh). One lab at a time: run it under `flock /tmp/pv-lab.lock`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provisioner import lab as lab_mod
from provisioner.lab.overlay import load  # the site with the running lab's endpoints

NODES_PER_CHASSIS = 4  # hci-2u4n
# An admin key for the installed nodes (validate requires one); the lab logs in with its own.
ADMIN_KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGf2mvZz4M6W7ePLkgoNZLE4yW8NMw4aSIDxQy2XY5Fc "
             "admin@bench")


def site_yaml(n: int) -> str:
    lines = [
        "site: {name: upscale,",
        f"       ssh: {{authorized_keys: ['{ADMIN_KEY}']}}}}",
        "credentials:",
        "  bmc: {username: admin, password: {env: UPSCALE_UNUSED_PASSWORD}}",
        "networks:",
        "  - {name: mgmt, kind: management, cidr: 10.248.0.0/24, gateway: 10.248.0.1}",
        "  - {name: oob, kind: oob, cidr: 10.248.1.0/24}",
        "racks:",
        "  - name: r01",
        "    height_u: 42",
        "    feeds: [{name: A, phase: three, voltage_v: 415, breaker_a: 63}]",
        "    cooling_kw: 40",
        "placements:",
    ]
    for c in range(0, n, NODES_PER_CHASSIS):
        lines += ["  - rack: r01", f"    u: {1 + 2 * (c // NODES_PER_CHASSIS)}",
                  "    block: hci-2u4n", "    nodes:"]
        for i in range(c, min(n, c + NODES_PER_CHASSIS)):
            lines += [f"      - hostname: n{i + 1:03d}",
                      f"        bmc: {{protocol: ipmi, address: 10.248.1.{i + 10}, "
                      "credentials: bmc}",
                      f"        addresses: {{mgmt: 10.248.0.{i + 10}}}"]
    return "\n".join(lines) + "\n"


def one(n: int, forks: int, workdir: Path) -> dict[str, float]:
    site = workdir / f"site{n}"
    site.mkdir()
    (site / "site.yaml").write_text(site_yaml(n))
    loaded = load(site)
    state = lab_mod.up(loaded, ssh_hosts=True, start_timeout_s=120)
    for note in state.notes:
        print(f"lab (N={n}): {note}", flush=True)
    try:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "provisioner", "up", str(site), "--json",
                               "--playbook", "ping.yml", "--verify-playbook", "ping.yml",
                               "--forks", str(forks)], capture_output=True, text=True,
                              check=False)
        wall = time.monotonic() - t0
    finally:
        lab_mod.down(loaded)
    if proc.returncode != 0:
        raise SystemExit(f"up failed for N={n}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    doc = json.loads(proc.stdout)
    ready = sum(x["phase"] == "ready" for x in doc["nodes"])
    assert ready == n, doc
    return {"wall_s": wall, "ansible_s": doc["ansible_s"], "tool_s": wall - doc["ansible_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,10,50")
    ap.add_argument("--forks", type=int, default=50)
    ap.add_argument("--smoke", action="store_true", help="sizes 1 and 2 only")
    args = ap.parse_args()
    sizes = [1, 2] if args.smoke else [int(s) for s in args.sizes.split(",")]
    rows = {}
    with tempfile.TemporaryDirectory(prefix="upscale-") as tmp:
        for n in sizes:
            rows[n] = one(n, args.forks, Path(tmp))
    base = rows[sizes[0]]["wall_s"]
    print(f"provision up, lab IPMI nodes, ping.yml for configure and verify, forks "
          f"{args.forks}")
    print(f"{'N':>4} {'T(N) s':>8} {'ansible s':>10} {'tool s':>8} {'tool s/node':>12} "
          f"{'T(N)/T(1)':>10}")
    for n, r in rows.items():
        print(f"{n:>4} {r['wall_s']:>8.2f} {r['ansible_s']:>10.2f} {r['tool_s']:>8.2f} "
              f"{r['tool_s'] / n:>12.3f} {r['wall_s'] / base:>10.2f}")
    last = sizes[-1]
    print(f"T({last})/T({sizes[0]}) = {rows[last]['wall_s'] / base:.2f} (goal <= 3)")


if __name__ == "__main__":
    main()
