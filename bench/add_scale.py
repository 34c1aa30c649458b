"""Does adding one node cost more as the cluster grows?

For sites of 10, 100 and 1,000 nodes (bench/inventory_scale.py's generated racks, split
into a site file, a racks file and a placements file, with every node enrolled and moved
to ready in the state store), one node is recorded as discovered (a DGX H100 fingerprint,
as `provision discover` writes it) and then added with

    provision add SITE --discovered ID --yes --no-up

in a fresh process each time (what an admin waits for: placement within the budgets,
allocation, the inventory write-back, the grown site loaded and checked, enrollment).
Printed, measured side by side in this one run (best of N): the process time T(N), the
core's time in-process (the same calls without interpreter start-up), and T(1,000)/T(10)
for both. Goal: T(1,000)/T(10) <= 1.5 for the process.

Not included: reading the new BMC (one Redfish session to one node, the same at every
size) and the bring-up of the node (`up --limit`, also one node).

    python bench/add_scale.py [--repeat 3] [--sizes 10,100,1000] [--smoke]

--smoke: sizes 10 and 20, one round, to see that the bench still runs end to end (its
ratio means nothing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the sibling bench's generated racks (bench/ is first on sys.path when run as a script)
from inventory_scale import generate

from provisioner import profile
from provisioner.discover import add as add_mod
from provisioner.lab.overlay import load  # the site with the running lab's endpoints
from provisioner.lifecycle import Phase
from provisioner.state import StateStore

ROOT = Path(__file__).resolve().parent.parent
ID = "disc-bench"
BENCH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGf2mvZz4M6W7ePLkgoNZLE4yW8NMw4aSIDxQy2XY5Fc bench"


def write_site(n: int, dest: Path) -> None:
    """The generated site as three files, with its lab overlay path unset."""
    text = generate(n)
    head, _, rest = text.partition("racks:\n")
    racks, _, placements = rest.partition("placements:\n")
    dest.mkdir(parents=True)
    # an installable site has an admin key (inventory/security.py refuses one without)
    (dest / "site.yaml").write_text(head.replace(
        f"site: {{name: scale-{n}}}", f"site: {{name: scale-{n}, ssh: {{authorized_keys: "
        f"['{BENCH_KEY}']}}}}", 1))
    (dest / "racks.yaml").write_text("racks:\n" + racks)
    # a rack with room at the end, as a site grows
    (dest / "racks.yaml").write_text(
        (dest / "racks.yaml").read_text()
        + "  - name: rnew\n    redundancy: 2N\n    cooling_kw: 40\n    feeds:\n"
        "      - {name: A, phase: three, voltage_v: 415, breaker_a: 63}\n"
        "      - {name: B, phase: three, voltage_v: 415, breaker_a: 63}\n")
    (dest / "placements.yaml").write_text("# generated\nplacements:\n" + placements)


def prepare(site: Path) -> None:
    """State at the site's size (every node ready) and one discovered node."""
    loaded = load(site)
    store = StateStore(profile.for_site(loaded).state_path)
    hosts = [n.hostname for p in loaded.site.placements for n in p.nodes]
    run = store.start_run("bench")
    store.enroll(hosts, run)
    for phase in (Phase.INSPECTED, Phase.BOOTING, Phase.OS_READY, Phase.CONFIGURED,
                  Phase.VERIFIED, Phase.READY):
        for h in hosts:
            store.transition(h, phase, run_id=run)
    store.enroll([ID], run, phase=Phase.DISCOVERED)  # its BMC in the oob network (checks)
    store.record(ID, "discovery", {
        "bmc": {"protocol": "redfish", "address": "10.31.250.1", "port": 443,
                "scheme": "https"},
        "lease_mac": "7c:c2:55:00:00:01", "error": None,
        "facts": {"vendor": "NVIDIA", "model": "DGXH100", "serial": "bench",
                  "gpus": [["H100", 8]], "nvswitch_count": 4, "macs": []},
        "block": "dgx-h100", "confidence": 1.0, "reasons": []}, run)
    store.end_run(run, "ok")


def process_s(site: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "provisioner", "add", str(site),
                           "--discovered", ID, "--yes", "--no-up", "--json"],
                          capture_output=True, text=True, env=env, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"provision add failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return took


def core_s(site: Path) -> float:
    t0 = time.perf_counter()
    loaded = load(site)
    store = StateStore(profile.for_site(loaded).state_path)
    source = add_mod.from_discovered(store, ID, "bmc")
    add_mod.add(loaded, store, source, apply=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--smoke", action="store_true", help="sizes 10 and 20, one round")
    args = ap.parse_args()
    if args.smoke:
        args.sizes, args.repeat = "10,20", 1
    sizes = [int(s) for s in args.sizes.split(",")]
    times: dict[tuple[int, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for n in sizes:
            write_site(n, work / f"site-{n}")
            prepare(work / f"site-{n}")
            core_s(shutil.copytree(work / f"site-{n}", work / f"warm-{n}"))  # warm imports
        # Round-robin over the sizes, so a busy moment of a shared machine hits every size
        # alike rather than one of them.
        for i in range(args.repeat):
            for n in sizes:
                for fn in (process_s, core_s):
                    site = shutil.copytree(work / f"site-{n}", work / f"run-{n}-{fn.__name__}-{i}")
                    times.setdefault((n, fn.__name__), []).append(fn(site))
    print(f"{'nodes':>6} {'process s':>10} {'core s':>8}")
    rows = [(n, min(times[(n, "process_s")]), min(times[(n, "core_s")])) for n in sizes]
    for n, proc_t, core_t in rows:
        print(f"{n:>6} {proc_t:>10.3f} {core_t:>8.3f}")
    (n0, p0, c0), (n1, p1, c1) = rows[0], rows[-1]
    print(f"T({n1})/T({n0}): process {p1 / p0:.2f}x, core {c1 / c0:.2f}x (goal <= 1.5 for "
          "the process)")


if __name__ == "__main__":
    main()
