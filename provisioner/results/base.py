"""The base of every JSON result and how it is written."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Out(BaseModel):
    """Base of every JSON result: unknown fields refused, immutable; `schema` by alias."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def dump(result: BaseModel) -> dict[str, Any]:
    """The JSON document (the schema field is spelled `schema`)."""
    return result.model_dump(mode="json", by_alias=True)


def schema_id(model: type[Out]) -> str:
    """The schema id a result model writes in its `schema` field."""
    return str(model.model_fields["schema_"].default)
