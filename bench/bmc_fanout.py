"""Does talking to many BMCs cost about as much as talking to one?

Starts the lab with a delaying proxy in front of every BMC (default 200 ms per request, as
real BMCs answer in 100 ms to seconds) for a generated site of 200 Redfish and 50 IPMI
nodes, then prints, measured side by side in this one run:

1. Redfish: wall time of "set PXE once + power on + wait until on" for N = 1, 50 and 200
   nodes, divided by the time for 1 node (goal: <= 3 at 200). The emulator applies power
   changes 1-11 s late at random, so every N is repeated and the median is reported.
2. IPMI: `provision bmc on` over the 50 IPMI nodes against a sequential
   `ipmitool chassis power on` loop over the same BMCs (goal: >= 20x faster), and against
   an admin's one-liner, `xargs -P 64` running the same ipmitool for all 50 at once (goal:
   <= 1.0x its time, though the tool also waits until every BMC reports on).

    python bench/bmc_fanout.py [--latency-ms 200] [--repeat 5] [--smoke]

--smoke: 4 Redfish and 2 IPMI nodes, 20 ms, one round per N, to see that the bench still runs
end to end (its ratios mean nothing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provisioner import bmc
from provisioner import lab as lab_mod
from provisioner.bmc import BootDevice, PowerAction
from provisioner.lab.overlay import load  # the site with the running lab's endpoints

N_REDFISH = 200
N_IPMI = 50


def site_yaml(n_redfish: int, n_ipmi: int) -> str:
    lines = [
        "site: {name: fanout, ssh: {authorized_keys: "
        "['ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGf2mvZz4M6W7ePLkgoNZLE4yW8NMw4aSIDxQy2XY5Fc "
        "admin@example']}}",
        "credentials:",
        "  bmc: {username: admin, password: {env: FANOUT_UNUSED_PASSWORD}}",
        "networks:",
        "  - {name: mgmt, kind: management, cidr: 10.8.0.0/16}",
        "  - {name: oob, kind: oob, cidr: 10.9.0.0/16}",
        "racks:",
    ]
    total = n_redfish + n_ipmi
    chassis = (total + 3) // 4
    racks = (chassis + 9) // 10
    for r in range(racks):
        lines.append(f"  - {{name: r{r:03d}, cooling_kw: 40, feeds: [{{name: A, phase: three, "
                     f"voltage_v: 415, breaker_a: 63}}]}}")
    lines.append("placements:")
    node = 0
    for c in range(chassis):
        lines.append(f"  - {{rack: r{c // 10:03d}, u: {1 + 2 * (c % 10)}, block: compute-2u4n, "
                     "nodes: [")
        for _ in range(4):
            if node >= total:
                break
            proto = "redfish" if node < n_redfish else "ipmi"
            name = f"rf{node:03d}" if proto == "redfish" else f"ipmi{node - n_redfish:03d}"
            hi, lo = divmod(node + 10, 250)
            lines.append(f"      {{hostname: {name}, bmc: {{protocol: {proto}, "
                         f"address: 10.9.{hi}.{lo}, credentials: bmc}}, "
                         f"addresses: {{mgmt: 10.8.{hi}.{lo}}}}},")
            node += 1
        lines.append("    ]}")
    return "\n".join(lines) + "\n"


def fanout(loaded, limit: str, op, concurrency: int = bmc.DEFAULT_CONCURRENCY) -> float:
    targets = bmc.targets(loaded, os.environ, limit)
    t0 = time.perf_counter()
    results = bmc.run_many(targets, op, bmc.make_driver, concurrency=concurrency,
                           node_timeout_s=300)
    elapsed = time.perf_counter() - t0
    failed = [r for r in results if not r.ok]
    if failed:
        raise SystemExit(f"{len(failed)} node(s) failed, e.g. {failed[0].error}")
    return elapsed


def round_of(loaded, limit: str) -> float:
    all_off(loaded, limit)
    return fanout(loaded, limit, pxe_and_on)


def again_once(run):
    """One round, run again once when a node failed in it, saying so: a lost power change
    in the lab's emulator stack is the lab's fault, not the fan-out's (the shape layer
    used to keep connections it then closed, and a reused one lost a reset to the proxy).
    Its time is left out; a second failure ends the bench."""
    try:
        return run()
    except SystemExit as exc:
        print(f"  (a round failed and runs again: {exc})")
        return run()


def pxe_and_on(driver) -> None:
    driver.set_boot_device(BootDevice.PXE, persistent=False)
    driver.set_power(PowerAction.ON, 120)


def all_off(loaded, limit: str) -> None:
    fanout(loaded, limit, lambda d: d.set_power(PowerAction.OFF, 120))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-ms", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--smoke", action="store_true",
                    help="4 Redfish and 2 IPMI nodes, 20 ms, one round")
    args = ap.parse_args()
    n_redfish, n_ipmi = (4, 2) if args.smoke else (N_REDFISH, N_IPMI)
    if args.smoke:
        args.latency_ms, args.repeat = 20, 1
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        site.mkdir()
        (site / "site.yaml").write_text(site_yaml(n_redfish, n_ipmi))
        base = load(site)
        t0 = time.perf_counter()
        lab_mod.up(base, latency_ms=args.latency_ms, start_timeout_s=120)
        print(f"lab: {n_redfish} Redfish + {n_ipmi} IPMI BMCs behind a {args.latency_ms} ms "
              f"proxy, started in {time.perf_counter() - t0:.1f} s")
        try:
            loaded = load(site)
            redfish(loaded, args.repeat, n_redfish, smoke=args.smoke)
            ipmi(loaded, site, args.latency_ms, n_ipmi)
        finally:
            lab_mod.down(base)


def redfish(loaded, repeat: int, n_redfish: int, *, smoke: bool = False) -> None:
    print("\nRedfish: set PXE once + power on + wait until on (median of "
          f"{repeat} runs, {3 * repeat} for 1 node; the emulator applies power 0-11 s late "
          "at random)")
    print(f"{'nodes':>6} {'median s':>9} {'min s':>7} {'max s':>7} {'T(N)/T(1)':>10}")
    base_t = None
    for n in sorted({1, min(50, n_redfish), n_redfish}):
        limit = ",".join(f"rf{i:03d}" for i in range(n))
        times = []
        for _ in range(3 * repeat if n == 1 and not smoke else repeat):
            times.append(again_once(lambda limit=limit: round_of(loaded, limit)))
        med = statistics.median(times)
        base_t = base_t or med
        print(f"{n:>6} {med:>9.2f} {min(times):>7.2f} {max(times):>7.2f} {med / base_t:>10.2f}")
    print("  (even a perfectly parallel tool sees about 11 s / 6 s here: N nodes wait for the "
          "slowest of N random delays, one node for a typical one)")


def ipmi(loaded, site: Path, latency_ms: int, n_ipmi: int) -> None:
    print(f"\nIPMI: power on {n_ipmi} BMCs ({latency_ms} ms per packet)")
    limit = "ipmi*"
    targets = bmc.targets(loaded, os.environ, limit)
    env = {**os.environ, "IPMI_PASSWORD": targets[0].password.reveal()}  # -E: not in argv
    all_off(loaded, limit)
    t0 = time.perf_counter()
    for t in targets:
        subprocess.run(["ipmitool", "-I", "lanplus", "-C", "3", "-H", t.address, "-p",
                        str(t.port), "-U", t.username, "-E", "chassis", "power", "on"],
                       env=env, check=True, capture_output=True)
    sequential = time.perf_counter() - t0
    # an admin's one-liner for the same 50: ipmitool in parallel, 64 at a time (it does
    # not wait for "on"; the tool does)
    lines = "".join(f"{t.address} {t.port} {t.username}\n" for t in targets)
    one_liner = ("xargs -P 64 -L 1 sh -c 'exec ipmitool -I lanplus -C 3 -H \"$0\" -p "
                 "\"$1\" -U \"$2\" -E chassis power on >/dev/null'")
    all_off(loaded, limit)
    t0 = time.perf_counter()
    subprocess.run(["sh", "-c", one_liner], input=lines, text=True, env=env, check=True)
    parallel = time.perf_counter() - t0
    all_off(loaded, limit)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "provisioner", "bmc", "on", str(site),
                           "--limit", limit, "--json"], capture_output=True, text=True,
                          check=False)
    ours = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stdout + proc.stderr)
    print(f"  sequential ipmitool loop : {sequential:7.2f} s")
    print(f"  xargs -P 64 ipmitool     : {parallel:7.2f} s (does not wait for on)")
    print(f"  provision bmc on         : {ours:7.2f} s (whole CLI process, waits until on)")
    print(f"  speed-up                 : {sequential / ours:7.1f}x over the loop")
    print(f"  against the one-liner    : {ours / parallel:7.2f}x its time (goal <= 1.0)")


if __name__ == "__main__":
    main()
