"""Findings: what validation says about an inventory, each pinned to file:line:column."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


class Category(StrEnum):
    """Inventory errors exit 3; budget errors (power, cooling, space) exit 4."""

    INVENTORY = "inventory"
    BUDGET = "budget"


@dataclass(frozen=True, slots=True)
class Location:
    file: str
    line: int
    column: int
    key_path: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.key_path}"


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    severity: Severity
    message: str
    hint: str | None = None
    location: Location | None = None
    category: Category = Category.INVENTORY

    def format(self) -> str:
        where = f"{self.location}: " if self.location else ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{where}{self.severity.value}: {self.message}{hint}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        data["category"] = self.category.value
        return data


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR]


def warnings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.WARNING]
