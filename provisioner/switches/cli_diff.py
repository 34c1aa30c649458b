"""Pure diff of indented CLI configs (IOS, EOS, Onyx): what to send, and how to undo it.

A config is read as paths: each line with the lines it is nested under. Desired paths that
the running config lacks are sent with their context lines; nothing else is touched, except
the stale lines below when the operator asks for them to go (`fabric push --prune`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

Path = tuple[str, ...]
COMMENT_PREFIXES = ("!", "#")


def paths(text: str) -> list[Path]:
    out: list[Path] = []
    stack: list[tuple[int, str]] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        body = line.strip()
        if not body or body.startswith(COMMENT_PREFIXES) or body in ("end", "exit"):
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, body))
        out.append(tuple(b for _, b in stack))
    return out


def missing(desired: str, running: str) -> list[Path]:
    have = set(paths(running))
    return [p for p in paths(desired) if p not in have]


def commands(todo: Iterable[Path]) -> list[str]:
    """Lines to type: a path's context lines are sent again only when the mode changes
    (IOS/EOS accept a top-level command from any sub-mode, so re-entering is safe)."""
    items = list(todo)
    out: list[str] = []
    mode: Path = ()
    for i, p in enumerate(items):
        parent = p[:-1]
        if parent != mode:
            out.extend(parent)
        out.append(p[-1])
        nxt = items[i + 1] if i + 1 < len(items) else ()
        mode = p if len(nxt) > len(p) and nxt[:len(p)] == p else parent
    return out


def plan(desired: str, running: str) -> list[str]:
    return commands(missing(desired, running))


def undo(applied: Sequence[str], desired_paths: Sequence[Path], running: str) -> list[str]:
    """Compensating commands for what was applied, newest first. A setting inside a block
    (same first word under the same parent, e.g. `description`) gets its old line back;
    anything else that was not there before is negated with `no`."""
    have = paths(running)
    applied_set = set(applied)
    headers = {p[:-1] for p in desired_paths if len(p) > 1}
    todo: list[Path] = []
    for p in reversed(desired_paths):
        if p[-1] not in applied_set or p in have:
            continue
        parent, leaf = p[:-1], p[-1]
        # a line that is itself a `no X` (EOS `no priority`) is undone by X as it was
        positive = leaf[3:] if leaf.startswith("no ") else None
        word = (positive or leaf).split()[0]
        before = [h for h in have if parent and p not in headers
                  and h[:-1] == parent and h[-1].split()[0] == word]
        if before:
            todo.append(before[0])
        elif positive is not None:
            todo.append((*parent, RESTORE.get(leaf, positive)))
        else:
            todo.append((*parent, f"no {leaf}"))
    return commands(todo)


# The setting a `no ...` line replaced where the running config shows no line for it (a
# default): EOS tx-queues are strict priority unless `no priority` makes them round-robin
# (Arista EOS User Manual, "Quality of Service": priority (tx-queue)).
RESTORE = {"no priority": "priority strict"}


def shape(line: str) -> str:
    """A line with its whole-number words as '#': `priority-flow-control priority 3 no-drop`
    and `... priority 4 ...` have one shape; `Ethernet1` and `1/1` keep their digits."""
    return " ".join("#" if w.isdigit() else w for w in line.split())


def _shape(p: Path) -> Path:
    # the blocks stay exact (the port, an EOS `tx-queue 1` an operator set ECN on): only
    # the leaf's own numbers vary
    return (*p[:-1], shape(p[-1]))


def stale(desired: str, running: str) -> list[Path]:
    """Running lines the rendering would own but does not render: inside a block it writes
    (a port; never a top-level line), a leaf with the shape of a rendered leaf in the same
    block. PFC left on priority 3 after the policy moved to 4 is one: EOS adds `priority 4
    no-drop` beside it. A single-valued setting (`mtu 1500`) is one too until a push
    replaces it, so a push reads the switch back before it removes anything. Not found:
    ECN left under the old queue (another block), and lines of a kind no longer rendered
    at all (PFC after a move to lossy)."""
    want = paths(desired)
    want_set = set(want)
    want_parents = {p[:-1] for p in want}
    shapes = {_shape(p) for p in want if len(p) > 1 and p not in want_parents}
    got = paths(running)
    got_parents = {p[:-1] for p in got}
    return [p for p in got if len(p) > 1 and p not in want_set and p not in got_parents
            and _shape(p) in shapes]


def negate(todo: Sequence[Path]) -> list[str]:
    """Lines that remove these leaves: each with its context, negated with `no`."""
    return commands((*p[:-1], f"no {p[-1]}") for p in todo)


def label(p: Path) -> str:
    return " > ".join(p)


def unified(desired: str, running: str, name: str) -> str:
    """Human diff of the parts of the running config the desired one touches."""
    want = paths(desired)
    heads = {p[0] for p in want}
    got = [p for p in paths(running) if p[0] in heads]
    fmt = ["  " * (len(p) - 1) + p[-1] for p in got]
    new = ["  " * (len(p) - 1) + p[-1] for p in want]
    return "".join(difflib.unified_diff([f"{x}\n" for x in fmt], [f"{x}\n" for x in new],
                                        f"{name} (running)", f"{name} (rendered)"))
