"""`kpilot docs`: architecture and ISA documentation at hand, with citations.

    kpilot docs search QUERY [--corpus NAME] [--limit N] [--json]
    kpilot docs show CITATION [--json]
    kpilot docs add PATH [--name NAME]        a folder, PDF, HTML, Markdown or text file
    kpilot docs list | remove NAME
    kpilot docs ask QUESTION [--provider ...] [--model ...] [--base-url ...] [--api-key ...]
"""

from __future__ import annotations

from pathlib import Path

import click

from kernelpilot.cli.output import echo, emit_json, table

__all__ = ["docs"]


@click.group("docs")
def docs() -> None:
    """Search the built-in corpus and your own documents (ISA manuals, guides), with citations."""


@docs.command("search")
@click.argument("query", nargs=-1, required=True)
@click.option("--corpus", help="Only this corpus (builtin, or a name given to `docs add`).")
@click.option("--limit", type=int, default=5, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def search_cmd(query: tuple[str, ...], corpus: str | None, limit: int, as_json: bool) -> None:
    """Ranked passages for QUERY, each with its citation."""
    from kernelpilot.tools import call

    d = call("docs_search", {"query": " ".join(query), "corpus": corpus, "limit": limit} if corpus else
             {"query": " ".join(query), "limit": limit})
    if as_json:
        emit_json(d)
        return
    if not d["hits"]:
        echo("no passage matches")
    for h in d["hits"]:
        echo(f"{h['citation']}  ({h['section']}; score {h['score']})\n    {h['snippet']}")


@docs.command("show")
@click.argument("citation")
@click.option("--json", "as_json", is_flag=True)
def show_cmd(citation: str, as_json: bool) -> None:
    """The passage CITATION names, with its sources and its neighbours."""
    from kernelpilot.docs.index import DocsIndex

    with DocsIndex() as d:
        p = d.show(citation)
    if as_json:
        emit_json(p)
        return
    echo(f"{p['citation']}: {p['section']}\n\n{p['text']}")
    if p["sources"]:
        echo("\nsources: " + "; ".join(p["sources"]))
    if p["neighbours"]:
        echo("nearby: " + ", ".join(p["neighbours"]))


@docs.command("add")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--name", help="The corpus name (default: from the file or folder name).")
def add_cmd(path: Path, name: str | None) -> None:
    """Index a folder, PDF, HTML, Markdown or text file as a corpus of your own."""
    from kernelpilot.docs.index import DocsIndex

    with DocsIndex() as d:
        r = d.add(path, name)
    echo(f"indexed {r['documents']} document(s), {r['passages']} passages as corpus {r['corpus']!r}")


@docs.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(as_json: bool) -> None:
    """The corpora in the index."""
    from kernelpilot.docs.index import DocsIndex

    with DocsIndex() as d:
        rows = d.corpora()
    if as_json:
        emit_json({"corpora": rows})
        return
    echo(table([[r["name"], r["passages"], r["source"]] for r in rows], ["corpus", "passages", "from"]))


@docs.command("remove")
@click.argument("name")
def remove_cmd(name: str) -> None:
    """Remove a corpus of your own."""
    from kernelpilot.docs.index import DocsIndex

    with DocsIndex() as d:
        d.remove(name)
    echo(f"removed {name!r}")


@docs.command("ask")
@click.argument("question", nargs=-1, required=True)
@click.option("--corpus", help="Only this corpus.")
@click.option("--provider", type=click.Choice(["anthropic", "openai"]), help="As for kpilot optimize --strategy llm.")
@click.option("--model", help="The model.")
@click.option("--base-url", help="The endpoint (any OpenAI-compatible server with --provider openai).")
@click.option("--api-key", help="The key (default: the provider's environment variable).")
@click.option("--json", "as_json", is_flag=True)
def ask_cmd(question, corpus, provider, model, base_url, api_key, as_json) -> None:
    """Answer QUESTION from the documentation only, citing the passages used."""
    from kernelpilot.docs.ask import ask
    from kernelpilot.docs.index import DocsIndex
    from kernelpilot.loop.llm_client import connect, load_config

    with DocsIndex() as d:
        text = " ".join(question)
        if not d.search(text, corpus=corpus, limit=1):
            from kernelpilot.docs.ask import NO_ANSWER

            out = {"answer": NO_ANSWER, "citations": [], "passages": []}
        else:
            cfg = load_config(provider=provider, model=model, api_key=api_key, base_url=base_url)
            out = ask(text, connect(cfg), index=d, corpus=corpus)
    if as_json:
        emit_json(out)
        return
    echo(out["answer"])
    if out["citations"]:
        echo("\ncited: " + ", ".join(out["citations"]))
