"""The documentation tools: search the corpus, and read a passage whole by its citation."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpilot.loop.llm_client import LLMChoice, WithKey
from kernelpilot.options import Options, param
from kernelpilot.tools.registry import ToolContext, register
from kernelpilot.tools.shapes import array_of, shape

__all__ = ["SearchRequest", "ShowRequest", "AddRequest", "RemoveRequest", "AskRequest", "NoOptions"]


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


@dataclass(frozen=True, kw_only=True)
class AddRequest(Options):
    path: Path = param("A folder, PDF, HTML, Markdown or text file to index.", argument=True, path=True,
                       required=True)
    name: str | None = param("The corpus name (default: from the file or folder name).")


@dataclass(frozen=True, kw_only=True)
class NoOptions(Options):
    """An operation that takes nothing."""


@dataclass(frozen=True, kw_only=True)
class RemoveRequest(Options):
    name: str = param("The corpus to remove (one added with docs_add; the built-in one stays).", argument=True,
                      required=True)


@dataclass(frozen=True, kw_only=True)
class AskRequest(LLMChoice, WithKey):
    question: str = param("The question, answered from the documentation only.", argument=True, required=True,
                          words=True)
    corpus: str | None = param("Only this corpus.")


@register("docs_add", """Index a document of your own (an ISA manual as PDF, a guide as HTML or Markdown, a folder of
    them) as a corpus that docs_search and docs_show then cover.""", AddRequest,
          shape(corpus="string", documents="integer", passages="integer"))
def docs_add(opts: AddRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.docs.index import DocsIndex

    with DocsIndex() as d:
        return d.add(opts.path, opts.name)


@register("docs_list", """The corpora in the documentation index: the built-in one and those added, with their
    passage counts and where they came from.""", NoOptions, shape(corpora=array_of()))
def docs_list(opts: NoOptions, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.docs.index import DocsIndex

    with DocsIndex() as d:
        return {"corpora": d.corpora()}


@register("docs_remove", """Remove a corpus that was added to the documentation index (its passages leave docs_search;
    the built-in corpus stays).""", RemoveRequest,
          shape(removed="string"))
def docs_remove(opts: RemoveRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.docs.index import DocsIndex

    with DocsIndex() as d:
        d.remove(opts.name)
    return {"removed": opts.name}


@register("docs_ask", """Answer a question from the documentation only, with a model: the passages that match
    are given to it and its answer cites them (needs an API key in the caller's environment). Without a matching
    passage the answer says so and no model is asked.""", AskRequest,
          shape(answer="string", citations=array_of("string"), passages=array_of("string"),
                optional=("tokens_in", "tokens_out"), tokens_in="integer", tokens_out="integer"))
def docs_ask(opts: AskRequest, ctx: ToolContext) -> dict[str, Any]:
    from kernelpilot.docs.ask import NO_ANSWER, ask
    from kernelpilot.docs.index import DocsIndex
    from kernelpilot.loop.llm_client import connect, load_config

    with DocsIndex() as d:
        if not d.search(opts.question, corpus=opts.corpus, limit=1):
            return {"answer": NO_ANSWER, "citations": [], "passages": []}
        cfg = load_config(provider=opts.provider, model=opts.model, api_key=opts.api_key, base_url=opts.base_url)
        return ask(opts.question, connect(cfg), index=d, corpus=opts.corpus)
