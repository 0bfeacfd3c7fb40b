"""`evalbeam report`: one self-contained HTML file from the data pipelines.reports.data reads.

Self-contained: the styles are inline, the charts inline SVG (pipelines.reports.charts), and
nothing is fetched from anywhere. A Content-Security-Policy meta tag makes that a rule the
browser enforces: no script, no connection, no image, font or stylesheet from outside. Every
string from the results (names, slices, reasons, instance fields) is HTML-escaped.
"""
from __future__ import annotations

import html
import math
import re
from typing import Any

from evalbeam.metrics.rows.fields import CANONICAL_FIELDS
from evalbeam.pipelines.reports import charts
from evalbeam.pipelines.reports.compare import flagged_first
from evalbeam.pipelines.reports.data import SHOWN_FIELDS

# Inline styles only (Matplotlib's SVG carries style attributes); nothing else from anywhere.
CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
FIELD_CHARS = 1200

STYLE = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: #1d1d1f; margin: 0 auto; padding: 24px 28px 48px; max-width: 1180px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 2px solid #e6e6e6; }
h3 { font-size: 15px; margin: 22px 0 6px; }
.sub { color: #555; margin: 0 0 14px; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { text-align: left; padding: 4px 9px 4px 0; border-bottom: 1px solid #eee; vertical-align: top; }
table.comparison { font-size: 13px; }
th { font-weight: 600; color: #333; border-bottom: 1px solid #ccc; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.nowrap { white-space: nowrap; }
details { margin: 4px 0 12px; }
summary { color: #2f6db3; }
.facts td:first-child { color: #555; padding-right: 18px; }
.ok { color: #2e7d32; font-weight: 600; }
.bad { color: #b3261e; font-weight: 600; }
.problems { background: #fdecea; border: 1px solid #f3b8b3; padding: 8px 14px; border-radius: 4px; }
.notes { background: #fff8e1; border: 1px solid #f0dc9c; padding: 8px 14px; border-radius: 4px; }
.verdict { font-size: 16px; padding: 8px 14px; border-radius: 4px; display: inline-block; margin: 4px 0 8px; }
.verdict.bad { background: #fdecea; border: 1px solid #f3b8b3; }
.verdict.ok { background: #e8f5e9; border: 1px solid #b7dfb9; }
tr.regression td { background: #fdecea; }
tr.regression td.flag { color: #b3261e; font-weight: 700; }
tr.improvement td { background: #e8f5e9; }
tr.improvement td.flag { color: #2e7d32; font-weight: 700; }
svg { max-width: 100%; height: auto; }
td.whisker { padding: 0 10px 0 0; vertical-align: middle; }
pre { white-space: pre-wrap; word-break: break-word; margin: 0; max-height: 16em; overflow: auto;
      font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
table.side { width: 100%; table-layout: fixed; }
table.side col.name { width: 150px; }
table.side td { border-bottom: none; padding: 2px 10px 2px 0; }
table.side tr.instance td { padding-top: 12px; border-bottom: 1px solid #ddd; }
td.field { color: #666; font-size: 12px; }
.diff { background: #fff7d6; }
nav a { margin-right: 14px; }
footer { margin-top: 40px; color: #777; font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 18px; align-items: flex-start; }
.charts figure { margin: 8px 0; }
.charts figcaption { font-size: 12px; color: #555; max-width: 300px; }
"""


def e(value: Any) -> str:
    """Any value as escaped HTML text."""
    return html.escape("" if value is None else str(value), quote=True)


def num(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        # a huge score in full would be hundreds of digits wide, pushing the table's charts off the page
        return f"{value:.{digits}f}" if abs(value) < 1e12 else f"{value:.{digits}e}"
    return e(value)


def anchor(metric: str) -> str:
    return "metric-" + re.sub(r"[^A-Za-z0-9_-]", "-", metric)


def render(data: dict[str, Any]) -> str:
    title = f"evalbeam report: {data['name']} {data['run_id']}"
    body = [
        f"<h1>{e(data['name'])} <span class=sub>run {e(data['run_id'])}</span></h1>",
        _nav(data),
        _header(data),
    ]
    if data["base_run_id"]:
        body.append(_comparison(data))
    body += [_summary(data), _repeats(data), _position_consistency(data),
             *([_calibration(data)] if data.get("calibration") else []),
             _metric_sections(data), *([_failure_modes(data)] if data.get("failure_modes") else []),
             *([_attacks(data)] if data.get("attack_summary") else []),
             _metric_errors(data), _dead_letters(data),
             f"<footer>Read from {e(data['results'])} by evalbeam {e(data['evalbeam_version'])}. "
             "Self-contained: this file loads nothing from the network.</footer>"]
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
        *body,
        "</body>",
        "</html>",
        "",
    ])


def _nav(data) -> str:
    links = [("#run", "Run")]
    if data["base_run_id"]:
        links.append(("#comparison", "Comparison"))
    links.append(("#summary", "Summary"))
    if any(s.get("pass_at_k") for s in data["summary"]):
        links.append(("#repeated-runs", "Repeated runs"))
    if any(s.get("position_consistency") is not None for s in data["summary"]):
        links.append(("#position-consistency", "Position consistency"))
    if data.get("calibration"):
        links.append(("#calibration", "Agreement with people"))
    links.append(("#metrics", "Metrics"))
    if data.get("failure_modes"):
        links.append(("#failure-modes", "Failure modes"))
    if data.get("attack_summary"):
        links.append(("#attacks", "Attacks"))
    links += [("#metric-errors", "Metric errors"),
              ("#dead-letters", "Dead letters")]
    return "<nav>" + "".join(f'<a href="{h}">{e(t)}</a>' for h, t in links) + "</nav>"


def _header(data) -> str:
    c = data["counts"]
    reconciles = ('<span class="ok">reconciles</span>' if data["reconciles"]
                  else '<span class="bad">DOES NOT RECONCILE</span>')
    rows = [
        ("eval", e(data["name"])),
        ("run_id", f"<code>{e(data['run_id'])}</code>"),
        ("run date", e(data["run_date"])),
        ("started / finished (UTC)", f"{_time(data['started_at'])} / {_time(data['finished_at'])}"),
        ("config digest", f"<code>{e(data['config_digest'])}</code> (sha256 of the config as run)"),
        ("records", f"read {num(c['read_count'])} = scored {num(c['scored_count'])} + dead-lettered "
                    f"{num(c['dead_letter_count'])}: {reconciles}"),
    ]
    if c.get("lines_read") is not None:
        rows.append(("source lines", f"{num(c['lines_read'])} = {num(c['lines_scored'])} scored + "
                                     f"{num(c['lines_dead_lettered'])} dead-lettered + {num(c['lines_skipped'])} holding no record"))
    rows.append(("metric errors", num(c["metric_error_count"])))
    judge = data["judge"]
    if judge:
        cost = ("no price in judge.prices" if judge["estimated_cost_usd"] is None
                else f"${judge['estimated_cost_usd']:.4f} (estimated)")
        rows += [
            ("judge calls", f"{num(judge['calls'])} calls for {num(judge['requests'])} judgments needed "
                            f"({num(judge['cache_hits'])} from the cache, {num(judge['rate_limited'])} rate-limited, "
                            f"{num(judge['failures'])} failed)"),
            ("judge tokens", f"{num(judge['prompt_tokens'])} prompt + {num(judge['output_tokens'])} output"),
            ("judge cost", e(cost)),
        ]
    else:
        rows.append(("judge calls", "none (no judge metric)"))
    out = ['<section id="run"><h2>Run</h2><table class="facts">']
    out += [f"<tr><td>{e(k)}</td><td>{v}</td></tr>" for k, v in rows]
    out.append("</table>")
    if data["problems"]:
        out.append('<div class="problems"><strong>Problems</strong><ul>'
                   + "".join(f"<li>{e(p)}</li>" for p in data["problems"]) + "</ul></div>")
    if data.get("notes"):
        out.append('<div class="notes"><strong>Notes</strong><ul>'
                   + "".join(f"<li>{e(n)}</li>" for n in data["notes"]) + "</ul></div>")
    out.append("</section>")
    return "\n".join(out)


def _time(value) -> str:
    return e(f"{value:%Y-%m-%d %H:%M:%S}") if hasattr(value, "strftime") else e(value)


def _comparison(data) -> str:
    rows = flagged_first(data["comparisons"])
    base = data["base_run_id"]
    regressed = [r for r in rows if r["regression"]]
    improved = [r for r in rows if r["improvement"]]
    out = [f'<section id="comparison"><h2>Compared with {e(base)}</h2>']
    if not rows:
        out.append("<p>No metric could be compared.</p></section>")
        return "\n".join(out)
    if regressed:
        names = ", ".join(sorted({r["metric"] for r in regressed}))
        out.append(f'<p class="verdict bad">{len(regressed)} regression(s) flagged: {e(names)}</p>')
    else:
        out.append('<p class="verdict ok">No regression flagged.</p>')
    if improved:
        out.append(f"<p>{len(improved)} improvement(s) flagged: {e(', '.join(sorted({r['metric'] for r in improved})))}</p>")
    overall = [r for r in rows if r["slice"] == "overall"]
    tolerances = ", ".join(f"{r['metric']} {num(r.get('tolerance'), 3)}"
                           + (f" ({r['tolerance_relative'] * 100:g}% of the base mean)" if r.get("tolerance_relative") is not None else "")
                           for r in overall)
    unwatched = sorted(r["metric"] for r in overall if r.get("watched") is False)
    out.append(f"<p class=sub>Paired by instance; base = {e(base)}; difference = this run minus base; 95% CI from a paired "
               f"bootstrap; p-value Holm-adjusted across the rows the gate watches. Flagged when the CI lies beyond the "
               f"metric's tolerance ({e(tolerances)}) on one side and the adjusted p-value is below alpha."
               + (f" Not watched by the gate, never flagged: {e(', '.join(unwatched))}." if unwatched else "") + "</p>")
    # the overall rows and every flagged one in view; the other slices' rows one click away
    # (<details>: no script needed)
    main = [r for r in rows if r["slice"] == "overall" or r["regression"] or r["improvement"]]
    rest = [r for r in rows if not (r["slice"] == "overall" or r["regression"] or r["improvement"])]
    out.append(_comparison_table(main))
    if rest:
        out.append(f"<details><summary>the other {len(rest)} slice row(s), none flagged</summary>"
                   f"{_comparison_table(rest)}</details>")
    unpaired = [r for r in rows if r["slice"] == "overall" and (r["only_in_base"] or r["only_in_run"] or r["error_in_either"])]
    for r in unpaired:
        out.append(f"<p class=sub>{e(r['metric'])}: not paired: {num(r['only_in_base'])} only in {e(base)}, "
                   f"{num(r['only_in_run'])} only in this run, {num(r['error_in_either'])} with an error in either.</p>")
    labelled = [r for r in rows if r["slice"] == "overall" and r.get("labelled_paired")]
    if labelled:
        out.append(_agreement_table(labelled, base))
    for metric, worst in data["worst"].items():
        out.append(_worst(metric, worst, base))
    out.append("</section>")
    return "\n".join(out)


def _agreement_table(rows: list[dict[str, Any]], base: str) -> str:
    """input.labels: which run's judge agrees more with the people (overall rows)."""
    out = [f"<h3>Agreement with human labels</h3><p class=sub>Per labelled metric, each run's agreement with the "
           f"people over the paired labelled instances, and the difference (this run minus {e(base)}) with its 95% "
           "paired bootstrap CI.</p>",
           '<table class="agreement"><tr><th>metric</th><th class=num>labelled</th><th>statistic</th>'
           "<th class=num>base</th><th class=num>this run</th><th class=num>difference</th><th>95% CI</th>"
           "<th>verdict</th></tr>"]
    for r in rows:
        ci = "-" if r["agreement_ci_low"] is None else f"[{num(r['agreement_ci_low'], 3)}, {num(r['agreement_ci_high'], 3)}]"
        verdict = {"run": "this run agrees more", "base": f"{base} agrees more"}.get(r["agrees_more"], "no clear difference")
        out.append(f'<tr><td>{e(r["metric"])}</td><td class=num>{num(r["labelled_paired"])}</td>'
                   f'<td>{e(r["agreement_statistic"] or "-")}</td><td class=num>{num(r["base_agreement"], 3)}</td>'
                   f'<td class=num>{num(r["run_agreement"], 3)}</td><td class=num>{num(r["agreement_difference"], 3)}</td>'
                   f'<td class=nowrap>{ci}</td><td>{e(verdict)}</td></tr>')
    out.append("</table>")
    return "\n".join(out)


def _comparison_table(rows: list[dict[str, Any]]) -> str:
    out = ['<table class="comparison"><tr><th>metric</th><th>slice</th><th class=num>paired</th>'
           "<th class=num>base mean</th><th class=num>mean</th><th class=num>difference</th><th>95% CI</th>"
           "<th class=num>p (Holm)</th><th class=num>wins/ties/losses</th><th>better</th><th>flag</th>"
           "<th>estimate</th><th>the gate</th></tr>"]
    for r in rows:
        cls = "regression" if r["regression"] else "improvement" if r["improvement"] else ""
        flag = "REGRESSION" if r["regression"] else "improvement" if r["improvement"] else ""
        ci = "-" if r["ci_low"] is None else f"[{num(r['ci_low'])}, {num(r['ci_high'])}]"
        out.append(
            f'<tr class="{cls}"><td>{e(r["metric"])}</td><td>{e(r["slice"])}</td><td class=num>{num(r["n_paired"])}</td>'
            f'<td class=num>{num(r["base_mean"])}</td><td class=num>{num(r["mean"])}</td>'
            f'<td class=num>{num(r["mean_difference"])}</td><td class=nowrap>{ci}</td>'
            f'<td class=num>{num(r["p_value_adjusted"])}</td>'
            f'<td class=num>{num(r["wins"])}/{num(r["ties"])}/{num(r["losses"])}</td><td>{e(r["direction"])}</td>'
            f'<td class="flag">{flag}</td>'
            # corrected: the means, difference, CI and p are human-corrected (PPI++; metrics.statistics.compare)
            f'<td>{"corrected (PPI++)" if r.get("estimate") == "corrected" else e(r.get("estimate") or "-")}</td>'
            # why the gate flagged the row or did not (metrics.statistics.compare.gate_reason; none on older rows)
            f'<td>{e(r.get("gate_reason") or "-")}</td></tr>')
    out.append("</table>")
    return "\n".join(out)


def _worst(metric: str, worst: list[dict[str, Any]], base: str) -> str:
    """The instances side by side: a field equal in both runs once across both columns, a
    field that differs in each run's column, highlighted."""
    out = [f"<h3>{e(metric)}: the instances that got worse most</h3>"]
    if not worst:
        out.append("<p>No paired instance got worse.</p>")
        return "\n".join(out)
    out.append('<table class="side"><colgroup><col class="name"><col><col></colgroup>'
               f"<tr><th></th><th>base ({e(base)})</th><th>this run</th></tr>")
    for w in worst:
        out.append(f'<tr class="instance"><td colspan=3><strong>instance <code>{e(w["instance_id"])}</code></strong>: '
                   f'{e(metric)} {num(w["base_score"])} &rarr; {num(w["score"])}</td></tr>')
        b, r = w["base_instance"], w["run_instance"]
        for field in _fields(b, r):
            if b.get(field) == r.get(field):
                out.append(f'<tr><td class="field">{e(field)}</td><td colspan=2><pre>{e(_clip(b.get(field)))}</pre></td></tr>')
            else:
                out.append(f'<tr><td class="field">{e(field)}</td><td><pre class="diff">{e(_clip(b.get(field)))}</pre></td>'
                           f'<td><pre class="diff">{e(_clip(r.get(field)))}</pre></td></tr>')
    out.append("</table>")
    return "\n".join(out)


def _fields(base: dict[str, Any], run: dict[str, Any]) -> list[str]:
    skip = {"run_id", "run_date", "instance_id"}
    present = [f for f in SHOWN_FIELDS if base.get(f) is not None or run.get(f) is not None]
    others = sorted(k for k in {*base, *run} - skip - set(present) - set(_canonical())
                    if base.get(k) is not None or run.get(k) is not None)
    return present + others


def _canonical() -> tuple[str, ...]:
    return tuple(CANONICAL_FIELDS)


def _clip(value: Any) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= FIELD_CHARS else text[:FIELD_CHARS] + f"... ({len(text)} characters)"


def _summary(data) -> str:
    overall = [s for s in data["summary"] if s["slice"] == "overall"]
    out = ['<section id="summary"><h2>Summary</h2>']
    if not overall:
        out.append("<p>No metric was scored.</p></section>")
        return "\n".join(out)
    out.append("<table><tr><th>metric</th><th class=num>n</th><th class=num>errors</th><th class=num>mean</th>"
               "<th class=num>se</th>"
               "<th>95% CI</th><th>mean and CI on the score range</th><th class=num>pass rate</th></tr>")
    for s in overall:
        info = data["metrics"].get(s["metric"], {})
        ci = "-" if s["ci_low"] is None else f"[{num(s['ci_low'])}, {num(s['ci_high'])}]"  # as the mean's 4 decimals
        errors = num(s["error_count"])
        if s["error_count"]:
            errors = f'<span class="bad">{errors}</span>'
        out.append(f'<tr><td><a href="#{anchor(s["metric"])}">{e(s["metric"])}</a></td>'
                   f'<td class=num>{num(s["valid_count"])}</td><td class=num>{errors}</td>'
                   f'<td class=num>{num(s["mean"])}</td><td class=num>{num(s.get("standard_error"))}</td><td>{ci}</td>'
                   f'<td class="whisker">{charts.whisker(s["mean"], s["ci_low"], s["ci_high"], info.get("range"))}</td>'
                   f'<td class=num>{num(s["pass_rate"], 3)}</td></tr>')
    out.append("</table></section>")
    return "\n".join(out)


def _calibration(data) -> str:
    """input.labels: each labelled metric's agreement with the people (the calibration table's
    overall rows, the agreement with its CI on -1..1), and its confusion as a heat map."""
    overall = [c for c in data["calibration"] if c["slice"] == "overall"]
    out = ['<section id="calibration"><h2>Agreement with people</h2>',
           "<p class=sub>Each labelled metric against its human labels (input.labels; the calibration table, "
           "every slice there): n instances with both a score and a label; the CI is of the weighted kappa on a "
           "categorical scale, of Spearman's rho on a continuous one (95%, bootstrap). The annotators' own "
           "agreement (Krippendorff's alpha) is the ceiling to read the judge against.</p>",
           "<table><tr><th>metric</th><th class=num>n</th><th class=num>bias</th><th class=num>MAE</th>"
           "<th class=num>spearman</th><th class=num>kendall tau-b</th><th class=num>kappa</th>"
           "<th class=num>weighted kappa</th><th>95% CI</th><th>agreement and CI on -1..1</th>"
           "<th class=num>accuracy</th><th class=num>precision</th><th class=num>recall</th><th class=num>F1</th>"
           "<th class=num>annotators' alpha</th></tr>"]
    for c in overall:
        agreement = c["weighted_kappa"] if c["scale"] == "categorical" else c["spearman"]
        ci = "-" if c["ci_low"] is None else f"[{num(c['ci_low'], 3)}, {num(c['ci_high'], 3)}]"
        out.append(f'<tr class="calibration"><td>{e(c["metric"])}</td><td class=num>{num(c["n"])}</td>'
                   f'<td class=num>{num(c["bias"], 3)}</td><td class=num>{num(c["mae"], 3)}</td>'
                   f'<td class=num>{num(c["spearman"], 3)}</td><td class=num>{num(c["kendall_tau"], 3)}</td>'
                   f'<td class=num>{num(c["kappa"], 3)}</td><td class=num>{num(c["weighted_kappa"], 3)}</td>'
                   f'<td>{ci}</td><td class="whisker">{charts.whisker(agreement, c["ci_low"], c["ci_high"], (-1.0, 1.0))}</td>'
                   f'<td class=num>{num(c["accuracy"], 3)}</td><td class=num>{num(c["precision"], 3)}</td>'
                   f'<td class=num>{num(c["recall"], 3)}</td><td class=num>{num(c["f1"], 3)}</td>'
                   f'<td class=num>{num(c["annotator_alpha"], 3)}</td></tr>')
    out.append("</table>")
    notes = [c for c in overall if c["note"]]
    if notes:
        out.append("<ul class=sub>" + "".join(f"<li>{e(c['metric'])}: {e(c['note'])}</li>" for c in notes) + "</ul>")
    out.append('<div class="charts">')
    for c in overall:
        if c["confusion"]:
            out.append(f'<figure class="confusion" data-metric="{e(c["metric"])}">'
                       f'{charts.confusion_heatmap(c["confusion"])}'
                       f"<figcaption>{e(c['metric'])}: human label (rows) against judge score (columns), "
                       f"{num(c['n'])} instances</figcaption></figure>")
    out.append("</div></section>")
    return "\n".join(out)


def _repeats(data) -> str:
    """inference.num_runs > 1: pass@k and pass^k per metric with a threshold and slice, a
    chart of each metric's overall curves; nothing without repeated runs."""
    rows = [s for s in data["summary"] if s.get("pass_at_k")]
    if not rows:
        return ""
    from evalbeam.pipelines.reports.text import shown_ks

    ks = shown_ks(max(len(s["pass_at_k"]) for s in rows))  # the chart has every k; the table a few, as `show`

    def at(curve) -> str:
        by_k = {p["k"]: p["value"] for p in curve or []}
        return "".join(f'<td class=num>{num(by_k.get(k), 3)}</td>' for k in ks)
    out = ['<section id="repeated-runs"><h2>Repeated runs</h2>',
           "<p class=sub>Each case ran several times (inference.num_runs). pass@k: the chance that at least one "
           "of k runs of a case passes; pass^k: that all k pass (unbiased estimators from a case's c passes in n "
           "valid runs, averaged over the cases with at least k valid runs). The summary's se and 95% CI resample "
           "cases, not runs. Between-run std: the mean over cases of the std of a case's scores.</p>",
           "<div class=charts>"]
    out += [f'<figure>{charts.pass_curves(s["metric"], s["pass_at_k"], s["pass_all_k"])}</figure>'
            for s in rows if s["slice"] == "overall"]
    out.append("</div><table><tr><th>metric</th><th>slice</th><th class=num>cases</th>"
               + "".join(f"<th class=num>pass@{k}</th>" for k in ks)
               + "".join(f"<th class=num>pass^{k}</th>" for k in ks) + "<th class=num>between-run std</th></tr>")
    for s in rows:
        out.append(f'<tr><td>{e(s["metric"])}</td><td>{e(s["slice"])}</td><td class=num>{num(s.get("case_count"))}</td>'
                   + at(s["pass_at_k"]) + at(s["pass_all_k"])
                   + f'<td class=num>{num(s.get("between_run_std"))}</td></tr>')
    out.append("</table></section>")
    return "\n".join(out)


def _position_consistency(data) -> str:
    """Pairwise metrics: the share of pairs whose two orders agree, per slice with its CI."""
    rows = [s for s in data["summary"] if s.get("position_consistency") is not None]
    if not rows:
        return ""
    out = ['<section id="position-consistency"><h2>Position consistency</h2>',
           "<p class=sub>Each pair is judged in both orders (the baseline shown first, then the candidate); "
           "this is the share of pairs whose two judgments chose the same response. A disagreement is scored a "
           "tie. Low consistency means the judge favours a position, not a response.</p>",
           "<table><tr><th>metric</th><th>slice</th><th class=num>consistency</th><th>95% CI</th>"
           "<th>on 0..1</th></tr>"]
    for s in rows:
        low, high = s.get("position_consistency_ci_low"), s.get("position_consistency_ci_high")
        ci = "-" if low is None else f"[{num(low, 3)}, {num(high, 3)}]"
        out.append(f'<tr><td>{e(s["metric"])}</td><td>{e(s["slice"])}</td>'
                   f'<td class=num>{num(s["position_consistency"], 3)}</td><td>{ci}</td>'
                   f'<td class="whisker">{charts.whisker(s["position_consistency"], low, high, (0.0, 1.0))}</td></tr>')
    out.append("</table></section>")
    return "\n".join(out)


def _metric_sections(data) -> str:
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for s in data["summary"]:
        by_metric.setdefault(s["metric"], []).append(s)
    out = ['<section id="metrics"><h2>Metrics</h2>',
           "<p class=sub>Per metric: the mean with its 95% CI overall and per slice, the distribution of the "
           "valid scores, and the overall mean over the eval's runs up to this one.</p>"]
    for metric, slices in by_metric.items():
        info = data["metrics"].get(metric, {})
        direction = info.get("direction")
        note = {"lower": " (lower is better)", "closer_to_zero": " (closer to 0 is better)"}.get(direction, "")
        out.append(f'<h3 id="{anchor(metric)}">{e(metric)}<span class=sub>{e(note)}</span></h3>')
        out.append(charts.metric_panel(metric, slices, data["histograms"].get(metric), data["trend"].get(metric, []),
                                       info, data["run_id"]))
    out.append("</section>")
    return "\n".join(out)


def _example_anchor(metric: str, instance_id: str) -> str:
    return "fm-" + anchor(f"{metric}-{instance_id}")


def _failure_modes(data) -> str:
    """Per metric: the modes' shares per slice (a chart), the modes with their counts, CIs and
    example instances, each linked to the instance and the judge's rationale below."""
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for r in data["failure_modes"]:
        by_metric.setdefault(r["metric"], []).append(r)
    out = ['<section id="failure-modes"><h2>Failure modes</h2>',
           "<p class=sub>Each failure of the metrics in failure_modes, classified by the judge into one mode of the "
           f"taxonomy {e(data['failure_modes'][0]['taxonomy_digest'])}; shares of the metric's failures per slice "
           "with 95% CIs (instances resampled).</p>"]
    examples = data.get("failure_examples") or {}
    for metric, rows in by_metric.items():
        out.append(f"<h3>{e(metric)}</h3>")
        out.append(charts.failure_mode_bars(metric, rows))
        out.append("<table><tr><th>slice</th><th>mode</th><th>count</th><th>failures</th><th>share</th>"
                   "<th>95% CI</th><th>examples</th></tr>")
        for r in sorted(rows, key=lambda r: (r["slice"] != "overall", r["slice"], -r["count"], r["mode"])):
            if not r["count"]:
                continue
            links = ", ".join(
                f'<a href="#{_example_anchor(metric, i)}"><code>{e(i)}</code></a>' if (metric, i) in examples
                else f"<code>{e(i)}</code>" for i in r["examples"])
            out.append(f"<tr><td>{e(r['slice'])}</td><td>{e(r['mode'])}</td><td>{r['count']}</td>"
                       f"<td>{r['failures']}</td><td>{num(r['share'], 3)}</td>"
                       f"<td>[{num(r['share_ci_low'], 3)}, {num(r['share_ci_high'], 3)}]</td><td>{links}</td></tr>")
        out.append("</table>")
        shown = [(i, x) for (m, i), x in examples.items() if m == metric]
        if shown:
            out.append('<table class="side"><colgroup><col class="name"><col></colgroup>')
            for instance_id, x in shown:
                out.append(f'<tr class="instance" id="{_example_anchor(metric, instance_id)}"><td colspan=2>'
                           f"<strong>instance <code>{e(instance_id)}</code></strong>: "
                           + "; ".join(f"{e(a['mode'] or 'unclassified')}"
                                       + (f" (rubric {e(a['rubric_id'])})" if a.get("rubric_id") else "")
                                       + f": {e(a['rationale'] or a['error'] or '')}" for a in x["assignments"])
                           + "</td></tr>")
                for field in _fields(x["instance"], x["instance"]):
                    out.append(f'<tr><td class="field">{e(field)}</td><td><pre>{e(_clip(x["instance"].get(field)))}'
                               "</pre></td></tr>")
            out.append("</table>")
    out.append("</section>")
    return "\n".join(out)


def _attacks(data) -> str:
    """Red teaming: attack success per family and target (overall) with its CI and the utility beside the
    twins, then the worst attacked runs, each beside its twin (the fields that differ highlighted)."""
    overall = [r for r in data["attack_summary"] if r["slice"] == "overall"]
    out = ['<section id="attacks"><h2>Attacks</h2>',
           "<p class=sub>Each case also ran under attack (red_team), beside its unattacked twin: the share of attacked "
           "runs whose attack reached its goal, with its 95% CI (cases resampled); the runs the attack reached; the "
           f"utility ({e(overall[0].get('utility_metric') or 'no metric')} passed) of the twins and under attack.</p>"
           if overall else "",
           "<table><tr><th>family</th><th>tool</th><th>path</th><th class=num>attacked</th><th class=num>succeeded</th>"
           "<th class=num>rate</th><th>95% CI</th><th class=num>reached</th><th class=num>utility twin</th>"
           "<th class=num>under attack</th></tr>"]
    for r in overall:
        user = r["delivery"] == "user_turn"
        out.append(f"<tr><td>{e(r['family'])}</td><td>{'the user&#x27;s turn' if user else e(r['tool'])}</td>"
                   f"<td><code>{'' if user else e(r['path'])}</code></td><td class=num>{num(r['attacked'])}</td>"
                   f"<td class=num>{num(r['succeeded'])}</td><td class=num>{num(r['attack_success_rate'], 3)}</td>"
                   f"<td class=nowrap>[{num(r['ci_low'], 3)}, {num(r['ci_high'], 3)}]</td>"
                   f"<td class=num>{num(r['delivered'])}</td><td class=num>{num(r['benign_utility'], 3)}</td>"
                   f"<td class=num>{num(r['utility_under_attack'], 3)}</td></tr>")
    out.append("</table>")
    examples = data.get("attack_examples") or []
    if examples:
        out.append("<h3>The worst attacked runs, beside their twins</h3>")
        out.append('<table class="side"><colgroup><col class="name"><col><col></colgroup>'
                   "<tr><th></th><th>twin (no attack)</th><th>attacked</th></tr>")
        for x in examples:
            attacked, twin, verdict = x["instance"], x["twin"] or {}, x["verdict"] or {}
            where = "the user's turn" if x["delivery"] == "user_turn" else f"{x['tool']} {x['path']}"
            said = "succeeded" if verdict.get("score") == 1.0 else "failed" if verdict.get("score") == 0.0 else "no verdict"
            out.append(f'<tr class="instance"><td colspan=3><strong>{e(x["family"])}</strong> in {e(where)}: '
                       f"<code>{e(attacked['instance_id'])}</code> {e(said)}"
                       f"{': ' + e(verdict.get('explanation') or verdict.get('error')) if verdict else ''}</td></tr>")
            for field in _fields(twin, attacked):
                if field in ("attack_id", "attack_family"):
                    continue
                if twin.get(field) == attacked.get(field):
                    out.append(f'<tr><td class="field">{e(field)}</td><td colspan=2><pre>{e(_clip(twin.get(field)))}'
                               "</pre></td></tr>")
                else:
                    out.append(f'<tr><td class="field">{e(field)}</td><td><pre class="diff">{e(_clip(twin.get(field)))}'
                               f'</pre></td><td><pre class="diff">{e(_clip(attacked.get(field)))}</pre></td></tr>')
        out.append("</table>")
    out.append("</section>")
    return "\n".join(out)


def _metric_errors(data) -> str:
    errors = data["metric_errors"]
    out = ['<section id="metric-errors"><h2>Metric errors</h2>']
    if not errors:
        out.append("<p>None: every metric scored every instance.</p></section>")
        return "\n".join(out)
    out.append(f"<p>{sum(x['n'] for x in errors)} metric result(s) carry an error, by reason:</p>")
    out.append("<table><tr><th>metric</th><th class=num>rows</th><th>reason</th></tr>")
    out += [f"<tr><td>{e(x['metric'])}</td><td class=num>{num(x['n'])}</td><td><pre>{e(_clip(x['error']))}</pre></td></tr>"
            for x in errors]
    out.append("</table></section>")
    return "\n".join(out)


def _dead_letters(data) -> str:
    dead = data["dead_letters"]
    total = data["counts"]["dead_letter_count"]
    out = ['<section id="dead-letters"><h2>Dead letters</h2>']
    if not total:
        out.append("<p>None: every record read was scored.</p></section>")
        return "\n".join(out)
    out.append(f"<p>{num(total)} record(s) could not be used. By reason:</p>")
    out.append("<table><tr><th class=num>records</th><th>field</th><th>reason</th><th>for example</th></tr>")
    out += [f"<tr><td class=num>{num(r['n'])}</td><td>{e(r['field'] or '-')}</td><td>{e(r['reason'])}</td>"
            f"<td>{e(_clip(r['example']))}</td></tr>" for r in dead["by_reason"]]
    out.append("</table>")
    first = dead["first"]
    out.append(f"<h3>The first {len(first)}{f' of {total}' if total > len(first) else ''}, in file and line order</h3>")
    out.append("<table><tr><th>source</th><th>reason</th><th>record (its start)</th></tr>")
    out += [f"<tr><td class=mono>{e(d['source'])}</td><td>{e(d['reason'])}</td><td><pre>{e(d.get('raw_record_start'))}</pre></td></tr>"
            for d in first]
    out.append("</table></section>")
    return "\n".join(out)
