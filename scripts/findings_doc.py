#!/usr/bin/env python3
"""Write docs/findings.md, the catalogue of every finding code, from the code itself: an
AST walk over provisioner/ collects the code each `Finding(...)`, `Refusal(...)` and
`emit(...)` call passes, with its severity, message and hint. Run it after adding or
changing a finding; tests/unit/test_findings_doc.py fails until the page matches the code.

Codes built at run time (an f-string such as f"duplicate-{kind}") are listed by their
pattern, with the values the code passes where a literal reaches the placeholder."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "findings.md"
# The calls that carry a finding code as their first argument, and where their message and
# hint are: (message position, hint position); a Finding's severity is its second argument.
CONSTRUCTORS = {"Finding": (2, 3), "Refusal": (1, 2), "emit": (2, 3)}
HOLE = "…"  # what an interpolated value reads as on the page
# What the source alone cannot say: a message made elsewhere (pydantic's, power.py's) or a
# placeholder filled from a typed value. Each key must still be a code or pattern in the
# source (the test checks), so a note cannot outlive its finding.
NOTES: dict[str, dict[str, str]] = {
    "inline-secret": {
        "meaning": "a credential's password is written in the inventory as a string; the "
                   "value is not echoed",
        "fix": "put the password in an environment variable ({env: VAR}), a 0600 file "
               "({file: /abs/path}) or a vault reference, and name that instead"},
    "duplicate-{kind}": {
        "fix": "host names, IP addresses, MACs and BMC endpoints are each unique in a site: "
               "change one of the two places the message names"},
    "bundle-file": {
        "meaning": "a release bundle under bundles/ cannot be read (the message names the "
                   "file and why)"},
    "schema-{kind}": {
        "meaning": "the inventory breaks the schema; {kind} is pydantic's error type "
                   "(missing, extra_forbidden, string_type, int_parsing, literal_error, "
                   "value_error, ...) and the message is pydantic's, with the key path",
        "values": "`schema-missing`, `schema-extra_forbidden`, `schema-value_error`, "
                  "`schema-string_type`, `schema-literal_error`, ... (any pydantic error "
                  "type)"},
    "{f.check}-over-budget": {
        "meaning": "a rack is over one of its budgets: the message gives the load against the "
                   "usable capacity (feed power after derating and 2N, cooling kW, airflow, "
                   "rack units), as `provision power` prints it",
        "values": "`power-over-budget`, `cooling-over-budget`, `airflow-over-budget`, "
                  "`space-over-budget` (power.py's `check`)"},
}


@dataclass
class Entry:
    """One code (or pattern) with everything the calls that raise it say."""

    code: str
    pattern: bool = False
    severities: set[str] = field(default_factory=set)
    messages: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    modules: set[str] = field(default_factory=set)
    values: set[str] = field(default_factory=set)

    def add(self, severity: str, message: str | None, hint: str | None, module: str) -> None:
        self.severities.add(severity)
        self.modules.add(module)
        if message and message not in self.messages:
            self.messages.append(message)
        if hint and hint not in self.hints:
            self.hints.append(hint)


@dataclass(frozen=True)
class _Wrapper:
    """A function that passes one of its parameters on as the code (yamlsafe.fail)."""

    code_index: int
    default: ast.expr | None
    message_index: int | None
    hint_index: int | None


def _text(node: ast.expr | None, fn: ast.AST | None = None) -> str | None:
    """A message or hint as a reader sees it, interpolated values as '…'; a local name
    reads as every value the function gives it."""
    if node is None:
        return None
    if isinstance(node, ast.Name) and fn is not None and _assigned(fn, node.id):
        texts = [t for t in (_text(v) for v in _assigned(fn, node.id)) if t and t != HOLE]
        return " / ".join(dict.fromkeys(texts)) or HOLE
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(_lit(v) if isinstance(v, ast.Constant) else HOLE for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return f"{_text(node.left) or HOLE}{_text(node.right) or HOLE}"
    if isinstance(node, ast.IfExp):
        a, b = _text(node.body), _text(node.orelse)
        return f"{a or HOLE} / {b or HOLE}" if a != b else a
    return HOLE


def _pattern(node: ast.JoinedStr) -> str:
    return "".join(_lit(v) if isinstance(v, ast.Constant)
                   else "{" + ast.unparse(v.value) + "}"  # type: ignore[attr-defined]
                   for v in node.values)


def _lit(node: ast.expr) -> str:
    """The text of a string constant (an f-string's literal parts), else nothing."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _arg(call: ast.Call, index: int | None, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if index is not None and index < len(call.args) \
            and not any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
        return call.args[index]
    return None


def _severity(call: ast.Call, ctor: str) -> str:
    if ctor == "Refusal":
        return "refusal"
    node = _arg(call, 1 if ctor == "Finding" else None, "severity")
    sev = node.attr.lower() if isinstance(node, ast.Attribute) else "error"
    cat = _arg(call, 5 if ctor == "Finding" else None, "category")
    if isinstance(cat, ast.Attribute) and cat.attr == "BUDGET":
        sev += " (budget)"
    return sev


class _Module:
    """One source file: its functions (for parameters and local assignments) and calls."""

    def __init__(self, path: Path, rel: str) -> None:
        self.rel = rel
        self.tree = ast.parse(path.read_text(), filename=rel)
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node

    def function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
        return None

    def calls(self) -> list[ast.Call]:
        return [n for n in ast.walk(self.tree) if isinstance(n, ast.Call)]


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    return [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]


def _default(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> ast.expr | None:
    pos = [*fn.args.posonlyargs, *fn.args.args]
    defaults = dict(zip([a.arg for a in pos][len(pos) - len(fn.args.defaults):],
                        fn.args.defaults, strict=True))
    defaults.update({a.arg: d for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults,
                                              strict=True) if d is not None})
    return defaults.get(name)


def _assigned(fn: ast.AST, name: str) -> list[ast.expr]:
    """The values a local name is given in a function (code = "x" if ... else f"y-{k}")."""
    out: list[ast.expr] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
            out.extend([value.body, value.orelse] if isinstance(value, ast.IfExp) else [value])
    return out


class Catalogue:
    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self.unresolved: list[str] = []

    def record(self, code: ast.expr, severity: str, message: str | None, hint: str | None,
               mod: _Module, fn: ast.AST | None) -> None:
        if isinstance(code, ast.Constant) and isinstance(code.value, str):
            entry = self.entries.setdefault(code.value, Entry(code.value))
        elif isinstance(code, ast.JoinedStr):
            pattern = _pattern(code)
            entry = self.entries.setdefault(pattern, Entry(pattern, pattern=True))
            entry.values |= _placeholder_values(code, mod, fn)
        elif isinstance(code, ast.Name) and fn is not None and _assigned(fn, code.id):
            for value in _assigned(fn, code.id):
                self.record(value, severity, message, hint, mod, fn)
            return
        else:
            self.unresolved.append(f"{mod.rel}:{code.lineno}: {ast.unparse(code)}")
            return
        entry.add(severity, message, hint, mod.rel)


def _placeholder_values(code: ast.JoinedStr, mod: _Module, fn: ast.AST | None) -> set[str]:
    """Literals that reach the one placeholder of a pattern through the enclosing function's
    parameter (dup("hostname", ...) -> duplicate-hostname)."""
    holes = [v for v in code.values if isinstance(v, ast.FormattedValue)]
    if len(holes) != 1 or not isinstance(holes[0].value, ast.Name) \
            or not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        return set()
    params = [a.arg for a in _params(fn)]
    if holes[0].value.id not in params:
        return set()
    index = params.index(holes[0].value.id)
    at = code.values.index(holes[0])
    prefix = "".join(_lit(v) for v in code.values[:at])
    suffix = "".join(_lit(v) for v in code.values[at + 1:])
    out = set()
    for call in mod.calls():
        if _name(call) == fn.name:
            arg = _arg(call, index, holes[0].value.id)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.add(f"{prefix}{arg.value}{suffix}")
    return out


def _wrappers(modules: list[_Module]) -> dict[str, _Wrapper]:
    """Functions that hand a parameter of theirs to Finding/Refusal as the code; their
    callers name the code (emit and the collector's __call__ are the emit calls)."""
    out: dict[str, _Wrapper] = {}
    for mod in modules:
        for call in mod.calls():
            ctor = _name(call)
            fn = mod.function(call)
            if ctor not in ("Finding", "Refusal") or fn is None or fn.name in ("emit",
                                                                              "__call__"):
                continue
            code = _arg(call, 0, "code")
            names = [a.arg for a in _params(fn)]
            if not isinstance(code, ast.Name) or code.id not in names:
                continue
            pos = {a.arg: i for i, a in enumerate([*fn.args.posonlyargs, *fn.args.args])}
            out[fn.name] = _Wrapper(pos.get(code.id, 10_000), _default(fn, code.id),
                                    pos.get("message"), pos.get("hint"))
    return out


def collect(root: Path = ROOT, package: str = "provisioner") -> Catalogue:
    """Every finding code under root/package, by walking the source (nothing is imported)."""
    modules = [_Module(p, p.relative_to(root).as_posix())
               for p in sorted((root / package).rglob("*.py"))]
    wrappers = _wrappers(modules)
    cat = Catalogue()
    for mod in modules:
        for call in mod.calls():
            name = _name(call)
            fn = mod.function(call)
            if name in wrappers:
                w = wrappers[name]
                code = _arg(call, w.code_index, "code") or w.default
                if code is not None:
                    cat.record(code, "error", _text(_arg(call, w.message_index, "message"), fn),
                               _text(_arg(call, w.hint_index, "hint"), fn), mod, fn)
                continue
            if name not in CONSTRUCTORS or not call.args:
                continue
            code = call.args[0]
            if isinstance(code, ast.Call | ast.Attribute | ast.Subscript):
                continue  # journal.emit(Progress(...)), not a finding
            if isinstance(code, ast.Name) and fn is not None and code.id in [
                    a.arg for a in _params(fn)]:
                continue  # the constructor inside a wrapper or the emit callable itself
            m, h = CONSTRUCTORS[name]
            cat.record(code, _severity(call, name), _text(_arg(call, m, "message"), fn),
                       _text(_arg(call, h, "hint"), fn), mod, fn)
    return cat


def _cell(texts: list[str], note: str | None = None, empty: str = HOLE) -> str:
    if note is not None:
        texts = [note]
    out = "<br>".join(re.sub(r"\s+", " ", t).strip() for t in texts if t.strip() != HOLE)
    return out.replace("|", "\\|") or empty


NO_HINT = "(no hint: the message names what to change)"

HEADER = """# Finding codes

Every finding the tool reports has a code: `provision validate` prints it with the file,
line, column and key (`--json` gives it as `code`), and `provision upgrade plan` prints a
refusal's code with its reason. This page lists every code in the source, generated by
`scripts/findings_doc.py` from the `Finding(...)`, `Refusal(...)` and `emit(...)` calls
under `provisioner/`; `tests/unit/test_findings_doc.py` fails when it is out of date. "…"
stands for a value filled in at run time (a host name, a version, a count).

Severity and exit code:

| severity | exit code |
|---|---|
| error | 3: the inventory (or the release bundle) is invalid; nothing is touched |
| error (budget) | 4 when these are the only errors: a rack over power, cooling, airflow or space |
| warning | none: printed, and the command goes on (exit 0) |
| refusal | 11: `upgrade plan`/`apply` refuses the bundle; nothing is touched |

A code with several severities is an error in one place and a warning in another (the
message says which case). The hint column is the tool's own hint, printed after the message.
The exit codes of every command are in the [README](../README.md#exit-codes).
"""


def render(cat: Catalogue) -> str:
    fixed = sorted((e for e in cat.entries.values() if not e.pattern), key=lambda e: e.code)
    patterns = sorted((e for e in cat.entries.values() if e.pattern), key=lambda e: e.code)
    lines = [HEADER, f"## Codes ({len(fixed)})", "",
             "| code | severity | what it means | the fix | raised in |", "|---|---|---|---|---|"]
    for e in fixed:
        note = NOTES.get(e.code, {})
        lines.append(f"| `{e.code}` | {', '.join(sorted(e.severities))} "
                     f"| {_cell(e.messages, note.get('meaning'))} "
                     f"| {_cell(e.hints, note.get('fix'), NO_HINT)} "
                     f"| {', '.join(f'`{m}`' for m in sorted(e.modules))} |")
    lines += ["", f"## Codes built at run time ({len(patterns)})", "",
              "The part in braces is filled in when the finding is made; where the code "
              "passes literal values, they are listed.", "",
              "| pattern | severity | codes | what it means | the fix | raised in |",
              "|---|---|---|---|---|---|"]
    for e in patterns:
        note = NOTES.get(e.code, {})
        values = note.get("values") or ", ".join(f"`{v}`" for v in sorted(e.values)) or HOLE
        lines.append(f"| `{e.code}` | {', '.join(sorted(e.severities))} | {values} "
                     f"| {_cell(e.messages, note.get('meaning'))} "
                     f"| {_cell(e.hints, note.get('fix'), NO_HINT)} "
                     f"| {', '.join(f'`{m}`' for m in sorted(e.modules))} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    cat = collect()
    for where in cat.unresolved:
        print(f"findings_doc: cannot tell the code of {where}", file=sys.stderr)
    PAGE.write_text(render(cat))
    return 1 if cat.unresolved else 0


if __name__ == "__main__":
    raise SystemExit(main())
