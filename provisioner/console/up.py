"""Terminal output of `provision up`: its progress (JSON lines, a live per-node table, or
plain lines) and its summary (a part of console.Console, kept apart to keep each module
short)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console as RichConsole
from rich.markup import escape
from rich.table import Table

from provisioner import results
from provisioner.console.plain import PlainProgress, ticking
from provisioner.console.state import PHASE_COLOR
from provisioner.errors import redact

if TYPE_CHECKING:
    from provisioner.workflows.up import Progress as UpProgress
    from provisioner.workflows.up import UpResult


class UpViews:
    out: RichConsole
    err: RichConsole
    json_mode: bool
    quiet: bool
    _said: set[str]  # the step lines up_progress said in full (see Console.__init__)

    @contextmanager
    def up_progress(self, nodes: Sequence[str], *, live: bool | None = None,
                    json_events: bool = False) -> Iterator[Callable[[UpProgress], None]]:
        """Progress of `up`: JSON lines on stdout (--json-events), a live per-node table on a
        terminal, or one plain line per step otherwise. Called from worker threads."""
        lock = threading.Lock()
        if json_events:
            def as_json(p: UpProgress) -> None:
                line = redact(json.dumps(results.dump(results.up_event(p))))
                with lock:
                    sys.stdout.write(line + "\n")
                    sys.stdout.flush()
            yield as_json
            return
        if self.json_mode or self.quiet:
            yield lambda p: None
            return
        if not (self.err.is_terminal if live is None else live):
            plain, stop = PlainProgress(self.err), threading.Event()
            timer = ticking(plain, stop)

            def say(p: UpProgress) -> None:
                plain(p)
                if p.node is not None and p.node not in nodes and p.detail \
                        and p.status in ("ok", "failed"):
                    self._said.add(f"{p.step}: {p.node} {p.detail}")  # the step's own note

            try:
                yield say
            finally:
                stop.set()
                timer.join()
            return
        from rich.live import Live

        rows: dict[str, list[str]] = {n: ["waiting", "", ""] for n in nodes}

        def table() -> Table:
            t = Table(title="provision up", title_justify="left")
            for col in ("node", "step", "state", "detail"):
                t.add_column(col, overflow="ellipsis", no_wrap=True,
                             max_width=80 if col == "detail" else None)
            for node, (step, state, detail) in rows.items():
                color = {"ok": "green", "failed": "red", "interrupted": "yellow"}.get(state, "")
                shown = f"[{color}]{state}[/]" if color else state
                t.add_row(node, step, shown, escape(detail))
            return t

        def update(p: UpProgress) -> None:
            if p.node is None:
                return
            with lock:
                row = rows.setdefault(p.node, ["", "", ""])
                if p.status == "task":
                    row[2] = p.detail
                else:
                    row[0], row[1], row[2] = p.step, p.status, p.detail

        with Live(get_renderable=table, console=self.err, refresh_per_second=4,
                  transient=False):
            yield update

    def up_result(self, result: UpResult) -> None:
        if result.nothing_to_do and not result.interrupted:
            self.out.print(f"nothing to do: all {len(result.nodes)} nodes are "
                           + ", ".join(sorted({n.phase.value for n in result.nodes}))
                           + f" (state: {result.state_path})")
            return
        table = Table(title=f"provision up: site {result.site}", title_justify="left")
        for col in ("node", "was", "now", "steps this run", "reason"):
            table.add_column(col)
        for n in result.nodes:
            color = PHASE_COLOR.get(n.phase.value, "yellow")
            now = n.phase.value + (f" ({n.failed_phase.value})" if n.failed_phase else "")
            table.add_row(n.hostname, n.start_phase.value, f"[{color}]{now}[/]",
                          ", ".join(n.steps) or "-", escape(n.reason or ""))
        self.out.print(table)
        for note in result.notes:
            if note not in self._said:  # a switch's step line said it in full already
                self.out.print(f"note: {escape(note)}")
        ready = sum(n.phase.value == "ready" for n in result.nodes)
        self.out.print(f"{ready} of {len(result.nodes)} ready, {len(result.failed)} failed"
                       + (", interrupted: run `provision up` again to resume"
                          if result.interrupted else "")
                       + f"; {result.elapsed_s:.0f} s")
        self.out.print(f"state: {result.state_path}")
        if result.project_dir:
            self.out.print(f"rendered project: {result.project_dir}")
        if result.artifact_dirs:
            self.out.print("playbook logs: " + ", ".join(result.artifact_dirs))
