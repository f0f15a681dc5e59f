"""Progress events of check, bench and eval (``runner._say``), said in one line for a person: on a terminal
(``cli/output.py``) and in MCP progress notices (``mcp_server.py``)."""

from __future__ import annotations

from typing import Any

__all__ = ["describe"]


def describe(e: dict[str, Any]) -> str | None:
    """One line for a person about a progress event of check, bench or eval."""
    stage = e.get("stage")
    if stage == "case":
        err = f"rel err {e['rel_err']:.2g}" if isinstance(e.get("rel_err"), (int, float)) else ""
        return f"  case {e.get('case')} seed {e.get('seed')}: {'ok' if e.get('ok') else 'FAIL'} {err}".rstrip()
    if stage == "timed":
        us = e.get("median_us")
        return f"  timed {e.get('case')}: " + (f"{us:.2f} us" if isinstance(us, (int, float)) else "-")
    if e.get("what"):
        n = e.get("cases") or e.get("outputs")
        return f"{e['what']}" + (f" ({n} {'cases' if e.get('cases') else 'outputs'})" if n else "") + " ..."
    return None
