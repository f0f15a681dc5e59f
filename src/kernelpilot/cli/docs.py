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

from kernelpilot.cli.output import Output, echo, emit_json, table
from kernelpilot.cli.spec import command
from kernelpilot.tools import run

__all__ = ["docs"]


@click.group("docs")
def docs() -> None:
    """Search the built-in corpus and your own documents (ISA manuals, guides), with citations."""


@command("docs_search", name="search", help="Ranked passages for QUERY, each with its citation.",
         examples="""
    kpilot docs search row_bcast DPP
    kpilot docs search long scoreboard stall --json""",
         context_settings={"ignore_unknown_options": False})
def search_cmd(opts, out: Output) -> None:
    out.result(run("docs_search", opts), _search_text)


def _search_text(d, paint) -> str:
    if not d["hits"]:
        return "no passage matches"
    return "\n".join(f"{h['citation']}  ({h['section']}; score {h['score']})\n    {h['snippet']}" for h in d["hits"])


@command("docs_show", name="show", help="The passage CITATION names, with its sources and its neighbours.",
         examples="kpilot docs show builtin/amd-dpp#row-bcast")
def show_cmd(opts, out: Output) -> None:
    out.result(run("docs_show", opts), _show_text)


def _show_text(p, paint) -> str:
    lines = [f"{p['citation']}: {p['section']}\n\n{p['text']}"]
    if p["sources"]:
        lines.append("\nsources: " + "; ".join(p["sources"]))
    if p["neighbours"]:
        lines.append("nearby: " + ", ".join(p["neighbours"]))
    return "\n".join(lines)


docs.add_command(search_cmd)
docs.add_command(show_cmd)


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
