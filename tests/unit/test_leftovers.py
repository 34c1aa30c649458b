"""A playbook left running by a killed `provision` (ansible-runner starts it in a session of
its own) is found by its inventory under the site's state directory and ended before the
next run; one whose `provisioner` parent is alive, or on another site, is left alone.
Real ansible-playbook processes, each pausing on localhost."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from provisioner import leftovers
from provisioner.state import StateStore

PLAYBOOK = """- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.pause:
        seconds: 300
"""
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def _project(root: Path) -> tuple[Path, Path]:
    (root / "ansible").mkdir(parents=True)
    inv, book = root / "ansible" / "inventory", root / "ansible" / "hang.yml"
    inv.write_text("localhost ansible_connection=local\n")
    book.write_text(PLAYBOOK)
    return inv, book


def _orphan(inv: Path, book: Path) -> None:
    """ansible-playbook re-parented away from its starter, as a SIGKILLed run leaves it."""
    subprocess.run(["setsid", "sh", "-c", f"{ANSIBLE_PLAYBOOK} -i {inv} {book} "
                    "</dev/null >/dev/null 2>&1 &"], check=True)


def _wait_for(state_dir: Path, n: int) -> list[int]:
    for _ in range(200):  # until it has started (not a time limit on the code under test)
        found = leftovers.orphaned_playbooks(state_dir)
        if len(found) >= n:
            return found
        time.sleep(0.05)
    return leftovers.orphaned_playbooks(state_dir)


def test_a_killed_runs_playbook_is_ended_and_others_are_left_alone(tmp_path):
    site_state, other_state = tmp_path / "site" / ".provision", tmp_path / "other"
    inv, book = _project(site_state)
    other_inv, other_book = _project(other_state)
    _orphan(inv, book)
    _orphan(other_inv, other_book)
    # a playbook of this site whose provisioner parent is alive (a live run)
    live = subprocess.Popen([sys.executable, "-c", "# provisioner, a live run\n"
                             "import subprocess, sys\n"
                             f"subprocess.run([{ANSIBLE_PLAYBOOK!r}, '-i', {str(inv)!r}, "
                             f"{str(book)!r}], stdout=subprocess.DEVNULL)"],
                            start_new_session=True)
    try:
        orphans = _wait_for(site_state, 1)
        assert orphans
        live_tree: set[int] = set()
        for _ in range(200):  # until the live run's playbook has started
            live_tree = {int(p) for p in subprocess.run(
                ["pgrep", "-P", str(live.pid)], capture_output=True, text=True).stdout.split()}
            if live_tree:
                break
            time.sleep(0.05)
        assert live_tree and not live_tree & set(orphans)
        store = StateStore(site_state / "state.db")
        run_id = store.start_run("up", backup=False)  # then killed: never ended
        notes = leftovers.after_killed_runs(store)
        assert notes[0].startswith(f"earlier run(s) {run_id} were killed")
        assert notes[1].startswith("ended ") and str(orphans[0]) in notes[1]
        time.sleep(0.2)
        assert leftovers.orphaned_playbooks(site_state) == []
        for pid in live_tree:  # the live run's playbook goes on
            os.kill(pid, 0)
        assert len(_wait_for(other_state, 1)) >= 1  # another site's is not ours to end
    finally:
        live.kill()
        # reaped first: until then its playbook still has a live parent and is not ended
        # (a CI run left it pausing after the suite)
        os.waitpid(live.pid, 0)
        leftovers.end_orphaned_playbooks(site_state)
        leftovers.end_orphaned_playbooks(other_state)
