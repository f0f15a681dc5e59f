"""Output schemas of the tools: the top level of each result, for MCP's ``outputSchema`` and for checking
results in tests. The full forms are documented in ``docs/`` (isa-json.md, eval.md, profile.md)."""

from __future__ import annotations

from typing import Any

__all__ = ["shape", "array_of", "ANY"]

ANY: dict[str, Any] = {}


def shape(schema_id: str | None = None, /, *, optional: tuple[str, ...] = (), **props: Any) -> dict[str, Any]:
    """An object schema: ``props`` name the fields (a JSON type name, or a schema), all required but those in
    ``optional``; ``schema_id`` fixes the ``"schema"`` field's value."""
    properties = {k: ({"type": v} if isinstance(v, str) else v) for k, v in props.items()}
    if schema_id is not None:
        properties = {"schema": {"type": "string", "const": schema_id}, **properties}
    return {"type": "object", "properties": properties,
            "required": [k for k in properties if k not in optional]}


def array_of(item: Any = "object") -> dict[str, Any]:
    return {"type": "array", "items": {"type": item} if isinstance(item, str) else item}
