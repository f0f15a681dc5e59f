"""The trace of an agent's step: every message, tool call (name, arguments), tool result, the tokens and the time
of each turn, kept with the step it led to in the run store (``StepRecord.trace``).

Texts are kept whole up to ``TEXT_LIMIT`` characters, then cut with their full size noted. Keys and tokens never
enter a trace: every text passes through ``scrub``, which replaces the values of this process's credential
variables and the API key in use (a key given on the command line is in no variable) before it is kept.
"""

from __future__ import annotations

import time
from typing import Any

from kernelpilot.evaluate.worker_env import redact_json

__all__ = ["Trace", "TEXT_LIMIT"]

TEXT_LIMIT = 20_000


def _cut(text: str) -> str:
    if len(text) <= TEXT_LIMIT:
        return text
    return text[:TEXT_LIMIT] + f"... [cut: {len(text):,} characters in all]"


class Trace:
    """A conversation as it happens; ``take`` hands out what came since the last take (one step's part)."""

    def __init__(self, secrets: dict[str, str] | None = None) -> None:
        self.items: list[dict[str, Any]] = []
        self.secrets = dict(secrets or {})      # value -> the name it is replaced by
        self._taken = 0

    def _keep(self, item: dict[str, Any]) -> None:
        from kernelpilot.evaluate.worker_env import secret_values

        clean = redact_json(item, {**secret_values(), **self.secrets})
        self.items.append(_cut_strings(clean))

    def user(self, text: str) -> None:
        self._keep({"role": "user", "text": text, "at": time.time()})

    def assistant(self, reply: Any, duration_s: float) -> None:
        self._keep({"role": "assistant", "text": reply.text,
                    "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls],
                    "tokens_in": reply.tokens_in, "tokens_out": reply.tokens_out,
                    "duration_s": round(duration_s, 3), "at": time.time()})

    def tool(self, call_id: str, name: str, content: str, is_error: bool, duration_s: float) -> None:
        self._keep({"role": "tool", "id": call_id, "name": name, "content": content, "bytes": len(content.encode()),
                    "is_error": is_error, "duration_s": round(duration_s, 3), "at": time.time()})

    def evaluation(self, events: list[dict[str, Any]], elapsed_s: dict[str, Any] | None) -> None:
        self._keep({"role": "evaluation", "events": events, "elapsed_s": elapsed_s or {}, "at": time.time()})

    def take(self) -> list[dict[str, Any]]:
        part = self.items[self._taken:]
        self._taken = len(self.items)
        return part


def _cut_strings(obj: Any) -> Any:
    if isinstance(obj, str):
        return _cut(obj)
    if isinstance(obj, dict):
        return {k: _cut_strings(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cut_strings(v) for v in obj]
    return obj
