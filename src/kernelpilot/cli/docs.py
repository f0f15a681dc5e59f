"""`kpilot docs`: architecture and ISA documentation at hand, with citations.

    kpilot docs search QUERY [--corpus NAME] [--limit N] [--json]
    kpilot docs show CITATION [--json]
    kpilot docs add PATH [--name NAME]        a folder, PDF, HTML, Markdown or text file
    kpilot docs list | remove NAME
    kpilot docs ask QUESTION [--provider ...] [--model ...] [--base-url ...] [--api-key ...]
"""

from __future__ import annotations

import click

from kernelpilot.cli.output import Output, table
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


@command("docs_add", name="add", help="Index a folder, PDF, HTML, Markdown or text file as a corpus of your own.",
         examples="kpilot docs add ~/manuals/mi300-isa.pdf --name mi300-isa")
def add_cmd(opts, out: Output) -> None:
    out.result(run("docs_add", opts), lambda r, paint: f"indexed {r['documents']} document(s), {r['passages']} "
                                                      f"passages as corpus {r['corpus']!r}")


@command("docs_list", name="list", help="The corpora in the index.", examples="kpilot docs list --json")
def list_cmd(opts, out: Output) -> None:
    out.result(run("docs_list", opts), lambda r, paint: table([[c["name"], c["passages"], c["source"]]
                                                              for c in r["corpora"]], ["corpus", "passages", "from"]))


@command("docs_remove", name="remove", help="Remove a corpus of your own.", examples="kpilot docs remove mi300-isa")
def remove_cmd(opts, out: Output) -> None:
    out.result(run("docs_remove", opts), lambda r, paint: f"removed {r['removed']!r}")


@command("docs_ask", name="ask", help="Answer QUESTION from the documentation only, citing the passages used.",
         examples="""
    kpilot docs ask how does row_bcast:31 finish a wave reduction
    kpilot docs ask what is a long scoreboard stall --provider openai --base-url http://localhost:8000/v1""")
def ask_cmd(opts, out: Output) -> None:
    out.result(run("docs_ask", opts), _answer_text)


def _answer_text(r, paint) -> str:
    return r["answer"] + ("\n\ncited: " + ", ".join(r["citations"]) if r["citations"] else "")


for _cmd in (add_cmd, list_cmd, remove_cmd, ask_cmd):
    docs.add_command(_cmd)
