"""A run as one self-contained HTML file that works offline (no request leaves it): its header, a chart of
speedup over steps (SVG, labelled axes, a legend, each step's hypothesis on hover), a step table that sorts and
filters, and per step its code diff, ISA summary, profile summary, evaluation and the agent's trace as a
conversation. Opening ``#step-N`` (clicking a step) shows that step. Read only from the run store."""

from __future__ import annotations

import html
import json
import math
import time
from pathlib import Path
from typing import Any

from kernelpilot.runs.store import RunRecord, RunStore, StepRecord

__all__ = ["run_html", "speedup_svg"]

_W, _H, _L, _R, _T, _B = 720, 340, 64, 20, 36, 72      # chart size and margins (px)


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values from ``lo`` to ``hi``, about ``n`` of them (1, 2, 2.5 or 5 times a power of ten apart)."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    out, v = [], math.ceil(lo / step) * step
    while v <= hi + 1e-9:
        out.append(round(v, 10))
        v += step
    return out


def speedup_svg(run: RunRecord, steps: list[StepRecord]) -> str:
    """Speedup over the start for each evaluated step: passing steps as dots (their hypothesis as a tooltip),
    failures as crosses on the axis, the best-so-far line, 1x and the goal as reference lines."""
    pts = [(s.n or 0, s.speedup if s.passed else None, s) for s in steps if s.kind != "pruned"]
    xs = [p[0] for p in pts] or [0]
    ys = [p[1] for p in pts if p[1]] + [1.0] + ([run.target] if run.target else [])
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y1 = max(ys) * 1.1
    y0 = 0.0

    def X(v: float) -> float:
        return _L + (v - x0) / (x1 - x0) * (_W - _L - _R)

    def Y(v: float) -> float:
        return _H - _B - (v - y0) / (y1 - y0) * (_H - _T - _B)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" role="img" id="speedup-chart" '
           f'aria-label="speedup over steps">',
           f'<text x="{_W / 2}" y="20" text-anchor="middle" class="title">Speedup over the start, by step</text>',
           f'<line x1="{_L}" y1="{_H - _B}" x2="{_W - _R}" y2="{_H - _B}" class="axis"/>',
           f'<line x1="{_L}" y1="{_T}" x2="{_L}" y2="{_H - _B}" class="axis"/>']
    for t in _ticks(x0, x1):
        if float(t).is_integer():
            out.append(f'<text x="{X(t):.1f}" y="{_H - _B + 16}" text-anchor="middle" class="tick">{int(t)}</text>')
    for t in _ticks(y0, y1):
        out.append(f'<line x1="{_L - 4}" y1="{Y(t):.1f}" x2="{_W - _R}" y2="{Y(t):.1f}" class="grid"/>'
                   f'<text x="{_L - 8}" y="{Y(t) + 4:.1f}" text-anchor="end" class="tick">{t:g}x</text>')
    out.append(f'<text x="{(_L + _W - _R) / 2}" y="{_H - _B + 34}" text-anchor="middle" class="label" '
               f'id="x-label">step</text>')
    out.append(f'<text transform="translate(16 {(_T + _H - _B) / 2}) rotate(-90)" text-anchor="middle" '
               f'class="label" id="y-label">speedup over the start (x)</text>')
    out.append(f'<line x1="{_L}" y1="{Y(1):.1f}" x2="{_W - _R}" y2="{Y(1):.1f}" class="one"/>')
    if run.target:
        out.append(f'<line x1="{_L}" y1="{Y(run.target):.1f}" x2="{_W - _R}" y2="{Y(run.target):.1f}" class="goal"/>')
    best, path = 0.0, []
    for n, sp, st in pts:
        if sp:
            best = max(best, sp)
        if best:
            path.append(f"{X(n):.1f},{Y(best):.1f}")
    if path:
        out.append(f'<polyline points="{" ".join(path)}" class="best"/>')
    for n, sp, st in pts:
        tip = _e(f"step {n} ({st.kind}): " + (f"{sp:g}x" if sp else "failed") + " - "
                 + (st.hypothesis or ", ".join(f"{k}={v}" for k, v in (st.params or {}).items())))
        if sp:
            out.append(f'<a href="#step-{n}"><circle cx="{X(n):.1f}" cy="{Y(sp):.1f}" r="5" class="pass">'
                       f'<title>{tip}</title></circle></a>')
        else:
            cx, cy = X(n), _H - _B
            out.append(f'<a href="#step-{n}"><path d="M{cx - 4:.1f},{cy - 4:.1f} l8,8 m0,-8 l-8,8" class="fail">'
                       f'<title>{tip}</title></path></a>')
    legend = [("pass", "a step that passed"), ("fail", "a step that failed"), ("best", "best so far"),
              ("one", "1x (the start)")] + ([("goal", "the goal")] if run.target else [])
    out.append(f'<g id="legend" transform="translate({_L} {_H - 12})">')    # one row under the x axis
    for i, (cls, label) in enumerate(legend):
        y = 0
        out.append(f'<g transform="translate({i * 130} 0)">')
        mark = (f'<circle cx="6" cy="{y}" r="4" class="{cls}"/>' if cls == "pass" else
                f'<path d="M2,{y - 4} l8,8 m0,-8 l-8,8" class="{cls}"/>' if cls == "fail" else
                f'<line x1="0" y1="{y}" x2="14" y2="{y}" class="{cls}"/>')
        out.append(mark + f'<text x="20" y="{y + 4}" class="legend">{_e(label)}</text></g>')
    out.append("</g></svg>")
    return "\n".join(out)


def _diff_html(diff: str | None) -> str:
    if not diff:
        return "<p class='muted'>no diff (the start, or no code)</p>"
    rows = []
    for line in diff.splitlines():
        cls = ("add" if line.startswith("+") and not line.startswith("+++") else
               "del" if line.startswith("-") and not line.startswith("---") else
               "hunk" if line.startswith("@@") else "")
        rows.append(f'<span class="{cls}">{_e(line)}</span>')
    return '<pre class="diff">' + "\n".join(rows) + "</pre>"


def _trace_html(trace: list[dict[str, Any]] | None) -> str:
    if not trace:
        return ""
    parts = []
    for t in trace:
        role = t.get("role")
        if role == "user":
            parts.append(f'<div class="msg user"><b>context</b><pre>{_e(t.get("text"))}</pre></div>')
        elif role == "assistant":
            calls = "".join(f'<div class="call">{_e(c.get("name"))}({_e(json.dumps(c.get("arguments"))[:2000])})</div>'
                            for c in t.get("tool_calls", []))
            parts.append(f'<div class="msg model"><b>model</b> <span class="muted">{t.get("tokens_in")}+'
                         f'{t.get("tokens_out")} tokens, {t.get("duration_s")} s</span><pre>{_e(t.get("text"))}</pre>'
                         f'{calls}</div>')
        elif role == "tool":
            cls = "error" if t.get("is_error") else ""
            parts.append(f'<div class="msg tool {cls}"><b>{_e(t.get("name"))}</b> <span class="muted">'
                         f'{t.get("bytes")} B, {t.get("duration_s")} s</span><pre>{_e(t.get("content"))}</pre></div>')
        elif role == "evaluation":
            stages = ", ".join(dict.fromkeys(str(e.get("stage")) for e in t.get("events", []) if e.get("stage")))
            parts.append(f'<div class="msg eval"><b>evaluation</b> <span class="muted">{_e(stages)}; '
                         f'{_e((t.get("elapsed_s") or {}).get("total"))} s</span>{_cases_table(t.get("cases"))}</div>')
    return "<h4>Trace</h4>" + "".join(parts)


def _cases_table(cases: dict[str, Any] | None) -> str:
    """Each timed case against its roofline floor (the time the bytes and FLOPs take at the GPU's peaks)."""
    if not cases:
        return ""
    rows = []
    for name, c in cases.items():
        share = f"{c['fraction']:.0%}" if c.get("fraction") else "-"
        rows.append(f"<tr><td>{_e(name)}</td><td>{_e(c.get('median_us'))}</td><td>{_e(c.get('floor_us') or '-')}</td>"
                    f"<td>{_e(share)}</td><td>{_e(c.get('bound') or '-')}</td></tr>")
    return ('<table class="cases"><thead><tr><th>case</th><th>median us</th><th>floor us</th><th>of floor</th>'
            f"<th>bound</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _isa_change(st: StepRecord, parent: StepRecord | None) -> str:
    """Each kernel's registers, spills and occupancy against the step it came from."""
    now = (st.isa or {}).get("kernels") or {}
    before = ((parent.isa if parent else None) or {}).get("kernels") or {}
    if not now:
        return ""
    keys = ("registers", "spill_bytes", "occupancy_pct", "limiter")
    rows = "".join(f"<tr><td>{_e(k)}</td>" + "".join(
        f"<td>{_e((before.get(k) or {}).get(f, '-'))} &rarr; {_e((now.get(k) or {}).get(f, '-'))}</td>"
        for f in keys) + "</tr>" for k in now)
    return (f"<h4>ISA change from step {_e(parent.n if parent else '-')}</h4><table class='isa'><thead><tr>"
            "<th>kernel</th><th>registers</th><th>spill bytes</th><th>occupancy %</th><th>limiter</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def _json_block(title: str, value: Any) -> str:
    if not value:
        return ""
    return f"<h4>{_e(title)}</h4><pre>{_e(json.dumps(value, indent=1)[:20000])}</pre>"


def _profile_html(profile: dict[str, Any] | None) -> str:
    """The step's profile as a person reads it: per kernel, its time, what bounds it, its occupancy, where its
    warps stalled and the first diagnoses; then the profile's notes."""
    if not profile:
        return ""
    if profile.get("error"):
        return f"<h4>Profile</h4><p class='muted'>not profiled: {_e(profile['error'])}</p>"
    rows = []
    for k in profile.get("kernels") or []:
        occ = k.get("occupancy") or {}
        occ_text = " / ".join(f"{occ[key]:g}%" for key in ("theoretical_pct", "achieved_pct")
                              if isinstance(occ.get(key), (int, float)))
        stalls = ", ".join(f"{s.get('reason')} {s.get('pct', 0):.0f}%" for s in k.get("top_stalls") or []
                           if isinstance(s, dict))
        diagnoses = "".join(f"<li>{_e(d)}</li>" for d in k.get("diagnoses") or [])
        rows.append(f"<tr><td><code>{_e(k.get('name'))}</code></td><td>{_e(k.get('duration_us') or '-')}</td>"
                    f"<td><b>{_e(k.get('bound') or '-')}</b></td><td>{_e(occ_text or '-')}</td>"
                    f"<td>{_e(stalls or '-')}</td><td><ul>{diagnoses}</ul></td></tr>")
    notes = "".join(f"<li>{_e(n)}</li>" for n in profile.get("notes") or [])
    return (f"<h4>Profile ({_e(profile.get('tool') or 'profiler')})</h4><table class='profile'><thead><tr>"
            "<th>kernel</th><th>us</th><th>bound</th><th>occupancy (theoretical / achieved)</th><th>top stalls</th>"
            "<th>diagnoses</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
            + (f"<ul class='muted'>{notes}</ul>" if notes else ""))


def _step_detail(st: StepRecord, parent: StepRecord | None = None) -> str:
    summary = st.check_summary or {}
    head = (f'<section class="detail" id="step-{st.n}" hidden><h3>Step {st.n} ({_e(st.kind)})</h3>'
            f'<p>{_e(st.hypothesis or "")}</p><p>correct: {_e(st.correct)}; passed: {_e(st.passed)}; median '
            f'{_e(st.median_us)} us; speedup {_e(st.speedup)}x{"; error: " + _e(st.error) if st.error else ""}</p>')
    failed = "".join(f"<li>{_e(f)}</li>" for f in summary.get("failed_cases", []) + summary.get("flags", []))
    return (head + (f"<ul>{failed}</ul>" if failed else "") + "<h4>Code change</h4>" + _diff_html(st.diff)
            + _isa_change(st, parent) + _json_block("ISA", st.isa) + _profile_html(st.profile)
            + _json_block("Times per case", st.timing)
            + _trace_html(st.trace) + "</section>")


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
.muted{color:#777} table{border-collapse:collapse;width:100%} th,td{border-bottom:1px solid #ddd;padding:4px 8px;
text-align:left} th{cursor:pointer;background:#f4f4f4} tr.fail td{color:#a00} tr:hover{background:#f0f6ff}
svg{width:100%;max-width:760px;height:auto} .axis{stroke:#333} .grid{stroke:#eee} .tick{font-size:11px}
.label{font-size:12px} .title{font-size:14px;font-weight:600} .legend{font-size:11px}
.pass{fill:#2a9d3a} .fail{stroke:#c0392b;stroke-width:2;fill:none} .best{stroke:#1f6feb;stroke-width:2;fill:none}
.one{stroke:#999;stroke-dasharray:3 3} .goal{stroke:#e67e22;stroke-dasharray:6 4}
pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:400px;white-space:pre-wrap}
.diff .add{color:#176f2c;background:#e6ffec} .diff .del{color:#a40e26;background:#ffebe9} .diff .hunk{color:#6639ba}
.msg{border-left:3px solid #ccc;padding-left:8px;margin:6px 0} .msg.model{border-color:#1f6feb}
.msg.tool{border-color:#2a9d3a} .msg.tool.error{border-color:#c0392b} .msg.eval{border-color:#e67e22}
#errors:empty{display:none} #errors{color:#a00} .pair{display:flex;gap:24px} .pair>div{flex:1;min-width:0}
"""

_JS = """
window.addEventListener('error', function (e) {
  document.getElementById('errors').textContent += 'script error: ' + e.message + '\\n';
});
function show() {
  var want = location.hash.slice(1);
  document.querySelectorAll('section.detail').forEach(function (s) { s.hidden = (s.id !== want); });
  document.querySelectorAll('#steps tbody tr').forEach(function (r) {
    r.classList.toggle('selected', 'step-' + r.dataset.n === want);
  });
}
function sortBy(col) {
  var body = document.querySelector('#steps tbody');
  var rows = Array.prototype.slice.call(body.rows);
  var dir = body.dataset.sorted === String(col) ? -1 : 1;
  body.dataset.sorted = dir === 1 ? String(col) : '';
  rows.sort(function (a, b) {
    var x = a.cells[col].dataset.v || a.cells[col].textContent, y = b.cells[col].dataset.v || b.cells[col].textContent;
    var nx = parseFloat(x), ny = parseFloat(y);
    if (!isNaN(nx) && !isNaN(ny)) return dir * (nx - ny);
    return dir * x.localeCompare(y);
  });
  rows.forEach(function (r) { body.appendChild(r); });
}
function filterRows() {
  var q = document.getElementById('filter').value.toLowerCase();
  var onlyPassed = document.getElementById('passed-only').checked;
  document.querySelectorAll('#steps tbody tr').forEach(function (r) {
    r.hidden = (q && r.textContent.toLowerCase().indexOf(q) < 0) || (onlyPassed && r.classList.contains('fail'));
  });
}
/* Wires the run's table and details; run again by a served page after it swaps in a newer #run. */
function init() {
  document.querySelectorAll('#steps th').forEach(function (th, i) { th.addEventListener('click', function () { sortBy(i); }); });
  document.querySelectorAll('#steps tbody tr').forEach(function (r) {
    r.addEventListener('click', function () { location.hash = 'step-' + r.dataset.n; });
  });
  document.getElementById('filter').addEventListener('input', filterRows);
  document.getElementById('passed-only').addEventListener('change', filterRows);
  filterRows();
  show();
}
window.addEventListener('hashchange', show);
document.addEventListener('DOMContentLoaded', function () {
  init();
  document.body.dataset.ready = '1';
});
"""


def _table(steps: list[StepRecord]) -> str:
    rows = []
    for st in steps:
        what = st.hypothesis or ", ".join(f"{k}={v}" for k, v in (st.params or {}).items())
        rows.append(f'<tr data-n="{st.n}" class="{"fail" if st.passed is False else ""}">'
                    f'<td data-v="{st.n}">{st.n}</td><td>{_e(st.kind)}</td><td>{_e(what[:200])}</td>'
                    f'<td>{"-" if st.correct is None else ("yes" if st.correct else "no")}</td>'
                    f'<td data-v="{st.median_us or ""}">{_e(st.median_us or "-")}</td>'
                    f'<td data-v="{st.speedup or ""}">{_e(f"{st.speedup:g}x" if st.speedup else "-")}</td>'
                    f'<td>{_e((st.error or "")[:120])}</td></tr>')
    return ('<p><input id="filter" placeholder="filter steps"> <label><input type="checkbox" id="passed-only"> '
            'passed only</label></p><table id="steps"><thead><tr><th>step</th><th>kind</th><th>hypothesis or '
            'parameters</th><th>correct</th><th>median us</th><th>speedup</th><th>error</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def _header(run: RunRecord) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(run.created))
    env = run.options.get("environment") or {}
    options = ", ".join(f"{k}={v}" for k, v in sorted(run.options.items())
                        if v not in (None, [], {}, "") and k != "environment")
    made_with = ", ".join(f"{k} {v}" for k, v in env.items() if v) or "not recorded"
    header = (f"<h1>Run {run.id}: {_e(run.strategy)} on {_e(Path(run.problem).name)}</h1>"
              f"<p>Started {when} on {_e(run.gpu or run.device or 'an unknown device')}; status <b>{_e(run.status)}"
              f"</b> ({_e(run.stop_reason or '-')}). Problem <code>{_e(run.problem)}</code>, start "
              f"<code>{_e(run.start_candidate)}</code>. Start time {_e(run.baseline_us)} us; best step "
              f"{_e(run.best_step)} at <b>{_e(run.best_speedup)}x</b>.</p><p class='muted' id='environment'>Made with: "
              f"{_e(made_with)}</p><p class='muted'>Options: {_e(options)}</p>")
    return header


def _compare_table(runs: list[tuple[RunRecord, list[StepRecord]]]) -> str:
    rows = [("strategy", lambda r, s: r.strategy), ("status", lambda r, s: f"{r.status} ({r.stop_reason or '-'})"),
            ("steps evaluated", lambda r, s: sum(1 for x in s if x.kind in ("start", "variant", "proposal"))),
            ("passed", lambda r, s: sum(1 for x in s if x.passed)),
            ("start, us", lambda r, s: r.baseline_us), ("best step", lambda r, s: r.best_step),
            ("best speedup", lambda r, s: f"{r.best_speedup}x" if r.best_speedup else "-"),
            ("tokens", lambda r, s: sum((x.tokens_in or 0) + (x.tokens_out or 0) for x in s) or "-")]
    head = "".join(f"<th>run {r.id}</th>" for r, _ in runs)
    body = "".join(f"<tr><td>{_e(name)}</td>" + "".join(f"<td>{_e(get(r, s))}</td>" for r, s in runs) + "</tr>"
                   for name, get in rows)
    return f'<table id="compare"><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>'


def run_html(store: RunStore, run_id: int, compare: int | None = None) -> str:
    """The page of run ``run_id``; with ``compare``, the two runs side by side (headers, charts, a table of what
    each reached, and each one's steps), the first one's steps open by their number."""
    run, steps = store.run(run_id), store.steps(run_id)
    body = _header(run) + speedup_svg(run, steps)
    if compare is not None:
        other, other_steps = store.run(compare), store.steps(compare)
        body = ("<h1>Runs " + f"{run.id} and {other.id}</h1>" + _compare_table([(run, steps), (other, other_steps)])
                + '<div class="pair"><div>' + body + "</div><div>" + _header(other)
                + speedup_svg(other, other_steps).replace('id="speedup-chart"', 'id="speedup-chart-2"')
                + f"<h2>Steps of run {other.id}</h2>" + _table(other_steps).replace('id="steps"', 'id="steps-2"')
                .replace('id="filter"', 'id="filter-2"').replace('id="passed-only"', 'id="passed-only-2"')
                + "</div></div>")
    by_n = {st.n: st for st in steps}
    body += f"<h2>Steps of run {run.id}</h2>" + _table(steps) + "".join(
        _step_detail(st, by_n.get(st.parent)) for st in steps)
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>kernelpilot run {run.id}</title><style>{_CSS}</style></head><body>"
            f"<pre id='errors'></pre><main id='run'>{body}</main><script>{_JS}</script></body></html>\n")
