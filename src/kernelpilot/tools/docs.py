"""The documentation tools: search the corpus, and read a passage whole by its citation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelpilot.options import Options, param
from kernelpilot.tools.registry import ToolContext, register
from kernelpilot.tools.shapes import array_of, shape

__all__ = ["SearchRequest", "ShowRequest"]


@dataclass(frozen=True, kw_only=True)
class SearchRequest(Options):
    query: str = param("Words to search for, e.g. 'row_bcast', 'long scoreboard stall'.", argument=True,
                       required=True, words=True)
    corpus: str | None = param("Only this corpus (builtin, or a name given to `docs add`).")
    limit: int = param("Passages at most.", 5, minimum=1)


@dataclass(frozen=True, kw_only=True)
class ShowRequest(Options):
    citation: str = param("CORPUS/DOCUMENT#ANCHOR, as docs_search gives it.", argument=True, required=True)


@register("docs_search", """Search the architecture and ISA documentation (the built-in corpus: GPU execution
    models, SASS and AMDGCN instruction guides such as DPP modifiers, profiler metrics; plus documents the user
    added) for passages that explain a finding, a metric or an instruction. Each hit has a citation
    (CORPUS/DOCUMENT#ANCHOR) to quote.""", SearchRequest, shape(query="string", hits=array_of()))
def docs_search(opts: SearchRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.docs.index import DocsIndex

    with DocsIndex() as d:
        hits = d.search(opts.query, corpus=opts.corpus, limit=opts.limit)
    return {"query": opts.query, "hits": [h.to_json() for h in hits]}


@register("docs_show", """Read one passage of the documentation whole, by the citation docs_search gave
    (CORPUS/DOCUMENT#ANCHOR): its section, text, sources and the passages next to it.""", ShowRequest,
          shape(citation="string", section="string", text="string", sources=array_of("string"),
                neighbours=array_of("string")))
def docs_show(opts: ShowRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.docs.index import DocsIndex

    with DocsIndex() as d:
        return d.show(opts.citation)
