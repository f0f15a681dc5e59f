"""How fast `kpilot docs search` answers over a large corpus: 5,000 pages of about 400 words each (built from
the built-in corpus's vocabulary, shuffled) indexed as one user corpus beside the built-in one; the median
and worst time of 30 searches of two to four words. Target: under 50 ms.

Writes benchmarks/results/docs_speed.json.   Run: python benchmarks/docs_speed.py [--pages N]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

from kernelpilot.docs.index import CORPUS_DIR, DocsIndex  # noqa: E402
from kernelpilot.docs.passages import Passage  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=5000)
    n = ap.parse_args().pages
    rng = random.Random(1)
    words = re.findall(r"[A-Za-z_]{3,}", " ".join(p.read_text() for p in CORPUS_DIR.glob("*.md")))
    pages = [Passage("big-manual.pdf", f"page {i}", f"p{i}", " ".join(rng.choices(words, k=400)), page=i)
             for i in range(1, n + 1)]
    with tempfile.TemporaryDirectory() as d:
        with DocsIndex(Path(d) / "docs.db") as index:
            t0 = time.perf_counter()
            index._replace("big", "synthetic", "", pages)
            build = time.perf_counter() - t0
            queries = [" ".join(rng.sample(words, rng.randint(2, 4))) for _ in range(30)]
            times = []
            for q in queries:
                t = time.perf_counter()
                index.search(q, limit=5)
                times.append((time.perf_counter() - t) * 1000)
    out = {"pages": n, "words_per_page": 400, "index_build_s": round(build, 2),
           "search_median_ms": round(statistics.median(times), 2), "search_max_ms": round(max(times), 2),
           "under_50ms": max(times) < 50}
    print(out)
    print(f"written to {write_results('docs_speed', out)}")


if __name__ == "__main__":
    main()
