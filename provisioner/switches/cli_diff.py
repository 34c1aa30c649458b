"""Pure diff of indented CLI configs (IOS, EOS, Onyx): what to send, and how to undo it.

A config is read as paths: each line with the lines it is nested under. Desired paths that
the running config lacks are sent with their context lines; nothing else is touched.
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
        parent, word = p[:-1], p[-1].split()[0]
        before = [h for h in have if parent and p not in headers
                  and h[:-1] == parent and h[-1].split()[0] == word]
        todo.append(before[0] if before else (*parent, f"no {p[-1]}"))
    return commands(todo)


def unified(desired: str, running: str, name: str) -> str:
    """Human diff of the parts of the running config the desired one touches."""
    want = paths(desired)
    heads = {p[0] for p in want}
    got = [p for p in paths(running) if p[0] in heads]
    fmt = ["  " * (len(p) - 1) + p[-1] for p in got]
    new = ["  " * (len(p) - 1) + p[-1] for p in want]
    return "".join(difflib.unified_diff([f"{x}\n" for x in fmt], [f"{x}\n" for x in new],
                                        f"{name} (running)", f"{name} (rendered)"))
