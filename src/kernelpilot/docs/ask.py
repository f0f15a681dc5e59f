"""`kpilot docs ask`: an answer from retrieved passages only, with their citations, through the configured LLM
(loop/llm_client.py). When no passage matches, it says so without asking the model; the model is told to
say so too when the passages do not hold the answer."""

from __future__ import annotations

from typing import Any

from kernelpilot.docs.index import DocsIndex

__all__ = ["ask", "NO_ANSWER"]

NO_ANSWER = "The documentation corpus holds no answer to this question."
_SYSTEM = ("You answer questions about GPU architecture and kernels using ONLY the numbered passages given. "
           "Cite every claim with the passage's citation in square brackets, e.g. [builtin/amdgcn.md#dpp]. "
           f"If the passages do not answer the question, reply exactly: {NO_ANSWER}")


def ask(question: str, model, *, index: DocsIndex, corpus: str | None = None, passages: int = 5) -> dict[str, Any]:
    """``{"answer", "citations", "passages", "tokens_in", "tokens_out"}``; ``model`` is a connected ChatModel."""
    from kernelpilot.loop.llm_client import Turn

    hits = index.search(question, corpus=corpus, limit=passages)
    if not hits:
        return {"answer": NO_ANSWER, "citations": [], "passages": [], "tokens_in": 0, "tokens_out": 0}
    shown = [index.show(h.citation) for h in hits]
    context = "\n\n".join(f"[{s['citation']}] ({s['section']})\n{s['text']}" for s in shown)
    reply = model.reply(_SYSTEM, [Turn("user", f"Passages:\n\n{context}\n\nQuestion: {question}")], [])
    cited = [h.citation for h in hits if f"[{h.citation}]" in reply.text]
    return {"answer": reply.text.strip(), "citations": cited, "passages": [h.citation for h in hits],
            "tokens_in": reply.tokens_in, "tokens_out": reply.tokens_out}
