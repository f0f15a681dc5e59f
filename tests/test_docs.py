"""`kpilot docs`: the built-in corpus answers the questions an agent asks, user documents (PDF, HTML, Markdown)
are searchable with page or section citations, and bad input is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import NCU_VECTORADD, ROOT, require_module

from kernelpilot.docs.index import DocsIndex
from kernelpilot.errors import InputFormatError, KernelpilotError, UsageError


@pytest.fixture
def index(tmp_path):
    with DocsIndex(tmp_path / "docs.db") as d:
        yield d


@pytest.mark.parametrize("query, anchor", [
    ("row_bcast", "builtin/amdgcn.md#dpp-row-bcast"),
    ("ds_bpermute versus DPP", "builtin/amdgcn.md#ds-bpermute-vs-dpp"),
    ("waves per SM", "builtin/nvidia.md#waves-per-sm"),
    ("wgmma", "builtin/nvidia.md#wgmma"),
    ("shared memory bank conflicts", "builtin/nvidia.md#bank-conflicts"),
    ("long scoreboard stall", "builtin/profiling.md#long-scoreboard"),
])
def test_builtin_corpus_answers_in_the_top_three(index, query, anchor):
    hits = index.search(query, limit=3)
    assert anchor in [h.citation for h in hits], [h.citation for h in hits]
    hit = next(h for h in hits if h.citation == anchor)
    assert hit.sources and hit.snippet and "\n" not in hit.snippet
    shown = index.show(anchor)
    assert shown["text"] and shown["sources"] == hit.sources


def test_passages_with_some_of_the_words_follow_those_with_all(index):
    hits = [h.citation for h in index.search("DPP gfx942 row_bcast", limit=5)]
    assert hits[0] == "builtin/amdgcn.md#dpp-row-bcast" and len(hits) == 5 and len(set(hits)) == 5
    # a mnemonic's parts count: passages on DPP and on v_add_f32 for an instruction no passage names whole
    parts = [h.citation for h in index.search("v_add_f32_dpp", limit=5)]
    assert "builtin/amdgcn.md#dpp" in parts


def test_a_word_repeated_is_one_word(index):
    once = [h.citation for h in index.search("row_bcast")]
    assert [h.citation for h in index.search(" ".join(["row_bcast"] * 250))] == once
    many = " ".join(f"w{i}" for i in range(500)) + " row_bcast"        # past the words used: the first 32
    assert index.search(many) == []


def _pdf(pages: list[str]) -> bytes:
    """A minimal PDF with one line of Helvetica text per page."""
    objs = ["<< /Type /Catalog /Pages 2 0 R >>",
            f"<< /Type /Pages /Kids [{' '.join(f'{3 + 2 * i} 0 R' for i in range(len(pages)))}] /Count {len(pages)} >>"]
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET"
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                    f"/Resources << /Font << /F1 {font} 0 R >> >> >>")
        objs.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    objs.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out, offsets = b"%PDF-1.4\n", []
    for n, o in enumerate(objs, start=1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n{o}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


def test_pdf_pages_are_cited(index, tmp_path):
    require_module("pypdf")
    pdf = tmp_path / "isa-guide.pdf"
    pdf.write_bytes(_pdf(["Vector ALU basics", "The permlane swap moves data across rows", "Scalar memory"]))
    r = index.add(pdf, "guide")
    assert r == {"corpus": "guide", "documents": 1, "passages": 3}
    (hit,) = index.search("permlane swap", corpus="guide")
    assert hit.citation == "guide/isa-guide.pdf#p2" and hit.page == 2 and hit.section == "page 2"


def test_html_and_markdown_sections_are_cited(index, tmp_path):
    folder = tmp_path / "manual"
    folder.mkdir()
    (folder / "memory.html").write_text(
        "<html><head><style>h2 {color: red}</style></head><body><h1>Memory</h1><p>Intro.</p>"
        "<h2 id='tma'>Tensor memory accelerator</h2><p>Bulk copies of tiles between global and shared memory.</p>"
        "<h2>Caches</h2><p>The L2 is split in two partitions.</p><script>var bulk = 1;</script></body></html>")
    (folder / "notes.md").write_text("# Notes\n\n## Swizzling {#swz}\nXOR the column with the row.\n\nSources: own\n")
    (folder / "skip.bin").write_bytes(b"\0\1")
    r = index.add(folder)
    assert r["corpus"] == "manual" and r["documents"] == 2
    (hit,) = index.search("bulk copies tiles", corpus="manual", limit=1)
    assert hit.citation == "manual/memory.html#tma" and hit.section == "Tensor memory accelerator"
    assert "var bulk" not in index.show(hit.citation)["text"]
    hit = index.search("XOR column", corpus="manual")[0]
    assert hit.citation == "manual/notes.md#swz" and hit.sources == ["own"]
    assert {c["name"] for c in index.corpora()} == {"builtin", "manual"}
    index.remove("manual")
    assert {c["name"] for c in index.corpora()} == {"builtin"}


def test_bad_input(index, tmp_path):
    require_module("pypdf")
    from pypdf import PdfReader, PdfWriter

    plain = tmp_path / "plain.pdf"
    plain.write_bytes(_pdf(["secret text"]))
    w = PdfWriter()
    for page in PdfReader(str(plain)).pages:
        w.add_page(page)
    w.encrypt("pw")
    locked = tmp_path / "locked.pdf"
    with open(locked, "wb") as f:
        w.write(f)
    with pytest.raises(InputFormatError, match="encrypted"):
        index.add(locked)
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    with pytest.raises(InputFormatError, match="not a readable PDF"):
        index.add(tmp_path / "broken.pdf")
    (tmp_path / "empty").mkdir()
    with pytest.raises(KernelpilotError, match="no documents in it"):
        index.add(tmp_path / "empty")
    with pytest.raises(KernelpilotError, match="no corpus named 'nope'"):
        index.search("dpp", corpus="nope")
    with pytest.raises(UsageError, match="not a citation"):
        index.show("dpp")
    with pytest.raises(UsageError, match="no words"):
        index.search("+++")
    with pytest.raises(UsageError, match="built-in corpus cannot be removed"):
        index.remove("builtin")


def test_cli_one_line_errors_and_json(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KPILOT_DOCS_DB": str(tmp_path / "d.db")}

    def kp(*args):
        return subprocess.run([sys.executable, "-m", "kernelpilot", "docs", *args], capture_output=True, text=True,
                              env=env, timeout=120)

    r = kp("search", "long", "scoreboard", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["hits"][0]["citation"] == "builtin/profiling.md#long-scoreboard"
    os.mkfifo(tmp_path / "pipe.md")                    # reading it would block for ever
    (tmp_path / "bad.pdf").write_bytes(b"%PDF-1.7\n" + os.urandom(2000))
    for args, needle in ((["search", "dpp", "--corpus", "nope"], "no corpus named 'nope'"),
                         (["add", str(tmp_path / "missing")], "no such file or folder"),
                         (["add", str(tmp_path / "pipe.md")], "not a regular file"),
                         (["add", str(tmp_path / "bad.pdf")], "not a readable PDF"),
                         (["show", "builtin/amdgcn.md#nothing"], "no passage")):
        r = kp(*args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode in (1, 2) and len(lines) == 1 and needle in lines[0], r.stderr


def test_every_finding_and_diagnosis_cites_a_passage_that_exists(index):
    import re

    from kernelpilot.docs.links import FINDING_DOCS

    src = ROOT / "src" / "kernelpilot"
    ids = set(re.findall(r'id="([a-z]+\.[a-z-]+)"', (src / "isa" / "findings.py").read_text()))
    ids |= set(re.findall(r'id="([a-z]+\.[a-z-]+)"', (src / "profile" / "diagnose.py").read_text()))
    ids |= {"occupancy.registers", "occupancy.shared"}
    assert ids <= set(FINDING_DOCS), sorted(ids - set(FINDING_DOCS))
    for cites in FINDING_DOCS.values():
        for c in cites:
            assert index.show(c)["text"]


def test_profile_diagnoses_carry_their_citations(tmp_path):
    from kernelpilot.profile.load import load_profile

    fx = NCU_VECTORADD
    small, full = load_profile(fx / "ncu_raw.csv").kernels
    assert small.diagnoses[0].docs == ["builtin/nvidia.md#waves-per-sm"]
    assert small.bound_evidence["docs"] == ["builtin/playbook.md#launch-bound"]
    assert full.bound_evidence["docs"] == ["builtin/playbook.md#memory-bound"]
    with DocsIndex(tmp_path / "d.db") as d:
        for bound in ("launch", "latency", "memory", "compute"):
            assert d.show(f"builtin/playbook.md#{bound}-bound")["text"]
    assert small.to_json()["diagnoses"][0]["docs"] == ["builtin/nvidia.md#waves-per-sm"]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_ask_answers_from_passages_with_citations(tmp_path, provider):
    require_module(provider)
    sys.path.insert(0, str(ROOT / "tests"))
    from llm_server import ScriptedLLM

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KPILOT_DOCS_DB": str(tmp_path / "d.db")}
    answer = ("row_bcast:15 sends lane 15 of each row to the next row [builtin/amdgcn.md#dpp-row-bcast].")
    with ScriptedLLM([{"text": answer, "tool_calls": []}]) as llm:
        r = subprocess.run([sys.executable, "-m", "kernelpilot", "docs", "ask", "what", "does", "row_bcast", "do",
                            "--provider", provider, "--base-url", llm.url(provider), "--api-key", "k", "--json"],
                           capture_output=True, text=True, env=env, timeout=120)
        sent = json.dumps(llm.requests[0]["body"])
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["answer"] == answer and out["citations"] == ["builtin/amdgcn.md#dpp-row-bcast"]
    assert "builtin/amdgcn.md#dpp-row-bcast" in out["passages"]
    assert "row_mask:0xa" in sent and "ONLY the numbered passages" in sent     # the passages went to the model


def test_ask_without_matching_passages_says_so_without_a_model(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KPILOT_DOCS_DB": str(tmp_path / "d.db")}
    r = subprocess.run([sys.executable, "-m", "kernelpilot", "docs", "ask", "zebra", "quokka", "--json"],
                       capture_output=True, text=True, env={k: v for k, v in env.items() if not k.endswith("API_KEY")},
                       timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["answer"] == "The documentation corpus holds no answer to this question."


def _bomb_pdf(inflated_bytes: int) -> bytes:
    """A one-page PDF whose content stream inflates (FlateDecode) to ``inflated_bytes`` of zeros."""
    import zlib

    z = zlib.compressobj(9)
    chunk = bytes(64 << 20)
    stream = b"".join(z.compress(chunk) for _ in range(inflated_bytes // len(chunk))) + z.flush()
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)


def test_a_pdf_that_inflates_to_a_gigabyte_is_refused_quickly(index, tmp_path):
    require_module("pypdf")
    import time

    bomb = tmp_path / "bomb.pdf"
    bomb.write_bytes(_bomb_pdf(1 << 30))
    assert bomb.stat().st_size < 4 << 20
    import resource

    t0 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss           # KiB
    with pytest.raises(KernelpilotError, match="not a readable PDF|no text could be read"):
        index.add(bomb)
    assert time.perf_counter() - t0 < 30
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 512 << 10   # never inflated whole


def test_a_query_of_one_word_repeated_is_answered_in_bounded_time(index):
    import time

    t0 = time.perf_counter()
    hits = index.search(" ".join(["dpp"] * 250) + " " + " ".join(f"w{i}" for i in range(200)))
    assert time.perf_counter() - t0 < 5
    assert hits and any("dpp" in (h.citation + h.snippet).lower() for h in hits)   # the word that is known is found
