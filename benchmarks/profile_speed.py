"""How long reading and diagnosing a large Nsight Compute report takes: the H200 fixture's two launches
(2,238 metrics each, `--set full`) repeated to 1,000 launches in ncu's raw-page CSV, diagnosed; then the
same with the details page (rule messages) repeated alike. Target: under 2 s.

The fixture's details page was exported with `--print-details all` (5,000 lines per launch, 324 MB for
1,000 launches); `kpilot profile` exports the default details page, which leaves out the charts and
breakdowns, so the second figure is a worst case.

Writes benchmarks/results/profile_speed.json.   Run: python benchmarks/profile_speed.py [--launches N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_of, write_results  # noqa: E402

from kernelpilot.profile.load import from_ncu_pages  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "ncu-h200"


def synthesize(n: int) -> tuple[str, str]:
    lines = (FIXTURES / "ncu_raw.csv").read_text().splitlines()
    header, units, rows = lines[0], lines[1], lines[2:]
    body = []
    for i in range(n):
        row = rows[i % len(rows)]
        body.append(f'"{i}"' + row[row.index(","):])      # a new launch ID
    details = (FIXTURES / "ncu_details.txt").read_text()
    start = details.index("  add(")
    one = details[start:]
    per = one.split("\n  add(")
    blocks = [per[0]] + ["  add(" + b for b in per[1:]]
    return "\n".join([header, units] + body) + "\n", "\n".join(blocks[i % len(blocks)] for i in range(n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=1000)
    n = ap.parse_args().launches
    raw, details = synthesize(n)
    seconds, prof = best_of(lambda: from_ncu_pages(raw, None, source="synthetic"), repeat=3)
    assert len(prof.kernels) == n and all(k.diagnoses for k in prof.kernels)
    with_details, prof = best_of(lambda: from_ncu_pages(raw, details, source="synthetic"), repeat=3)
    assert all(k.tool_rules for k in prof.kernels)
    out = {"launches": n, "metrics_in_csv": prof.kernels[0].metrics and len(raw.splitlines()[0].split('","')),
           "csv_mb": round(len(raw) / 1e6, 1), "seconds": round(seconds, 3), "under_2s": seconds < 2.0,
           "details_all_mb": round(len(details) / 1e6, 1), "with_details_all_seconds": round(with_details, 3)}
    print(out)
    print(f"written to {write_results('profile_speed', out)}")


if __name__ == "__main__":
    main()
