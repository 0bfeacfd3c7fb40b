"""The charts of `evalbeam report`: static SVG drawn by Matplotlib, inlined in the HTML.

Why static SVG from Matplotlib rather than Vega-Lite (Altair) or Plotly: the report must open
offline, from an email attachment or a bucket, in viewers that run no script, and its
Content-Security-Policy allows none. Vega-Lite and Plotly draw in the browser with JavaScript
(megabytes of it inlined per file); an SVG is the drawing itself, needs nothing to render,
scales sharply and prints. Matplotlib, the well-kept plotting library, writes it here once.

Output is deterministic: the Agg backend, a fixed `svg.hashsalt` (the ids of clip paths), no
date in the metadata, and text kept as SVG text (`svg.fonttype: none`: searchable, small, drawn
in the reader's sans-serif font).

Matplotlib is the optional extra `report` (pip install 'evalbeam[report]'); without it,
`evalbeam report` says so and nothing else needs it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import re
import sys
from typing import Any

EXTRA_MESSAGE = ("evalbeam report draws its charts with Matplotlib, which is not installed: "
                 "install the 'report' extra (pip install 'evalbeam[report]')")

RC = {
    "svg.hashsalt": "evalbeam-report",
    "svg.fonttype": "none",
    "text.parse_math": False,  # a slice value with $ in it is text, not math
    "font.family": "sans-serif",
    "font.size": 8.5,
    "axes.titlesize": 9.5,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#888888",
    "axes.grid": True,
    "grid.color": "#e4e4e4",
    "grid.linewidth": 0.6,
    "xtick.color": "#444444",
    "ytick.color": "#444444",
}
BLUE, RED, GREEN, GREY = "#2f6db3", "#c0392b", "#2e8b57", "#9a9a9a"
MAX_SLICES = 14


class ChartsUnavailable(RuntimeError):
    """Matplotlib (the `report` extra) is not installed."""


def _pyplot():
    try:
        import matplotlib  # start-up time: Matplotlib only for a report's charts
    except ImportError:
        raise ChartsUnavailable(EXTRA_MESSAGE) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up time: Matplotlib only for a report's charts

    return matplotlib, plt


def require() -> None:
    """Fail early, before any results are read, when the extra is missing."""
    _pyplot()


@contextlib.contextmanager
def _figure(width: float, height: float, ncols: int = 1):
    matplotlib, plt = _pyplot()
    with matplotlib.rc_context(RC):
        fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False)
        try:
            yield fig, list(axes[0])
        finally:
            plt.close(fig)


_XML_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", pad_inches=0.04,
                metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    # inlined in HTML: no XML declaration or DOCTYPE, and no RDF metadata (it names web URIs)
    return _METADATA.sub("", _XML_PROLOGUE.sub("", buf.getvalue(), count=1)).strip()


def _finite(*values) -> bool:
    return all(v is not None and isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def _limits(score_range, values: list[float]) -> tuple[float, float] | None:
    values = [v for v in values if _finite(v)]
    if score_range:
        lo, hi = score_range
        lo, hi = min([lo, *values]), max([hi, *values])
    elif values:
        lo, hi = min(0.0, min(values)), max(values)
    else:
        return None
    # on halves: finite for any finite lo and hi; one value: a margin it does not swallow (1e300 + 0.5 == 1e300)
    pad = (hi / 2 - lo / 2) * 0.08 or max(abs(lo) * 0.04, 0.5)
    lo, hi = lo - pad, hi + pad
    if not math.isfinite(hi - lo):
        # a range no float holds (means of -1e308 and 1e308): its middle, where Matplotlib's
        # axis and ticks still compute without overflowing
        lo, hi = max(lo, -sys.float_info.max / 16), min(hi, sys.float_info.max / 16)
    return lo, hi


def whisker(mean, ci_low, ci_high, score_range) -> str:
    """A small mean-with-CI mark for the summary table, on the metric's score range."""
    limits = _limits(score_range, [mean, ci_low, ci_high])
    with _figure(2.1, 0.3) as (fig, [ax]):
        ax.grid(False)
        for side in ("left", "bottom"):
            ax.spines[side].set_visible(False)
        ax.set_yticks([])
        ax.set_ylim(-1, 1)
        if limits:
            ax.set_xlim(*limits)
            ax.axhline(0, color="#dddddd", linewidth=3, zorder=0, solid_capstyle="butt")
        if _finite(ci_low, ci_high):
            ax.plot([ci_low, ci_high], [0, 0], color=BLUE, linewidth=1.6)
            ax.plot([ci_low, ci_low], [-0.5, 0.5], color=BLUE, linewidth=1.2)
            ax.plot([ci_high, ci_high], [-0.5, 0.5], color=BLUE, linewidth=1.2)
        if _finite(mean):
            ax.plot([mean], [0], "o", color=BLUE, markersize=4.5)
        ax.tick_params(axis="x", labelsize=6.5, length=2, pad=1)
        ax.locator_params(axis="x", nbins=3)
        return _svg(fig)


def metric_panel(metric: str, slices: list[dict[str, Any]], histogram: dict[str, Any] | None,
                 trend: list[dict[str, Any]], info: dict[str, Any], run_id: str) -> str:
    """One metric: mean and CI per slice | distribution of the scores | trend over the eval's runs."""
    score_range = info.get("range")
    with _figure(10.5, 2.7, ncols=3) as (fig, (by_slice, dist, over_time)):
        _by_slice(by_slice, slices, score_range, info.get("threshold"))
        _distribution(dist, histogram, score_range)
        _trend(over_time, trend, score_range, run_id)
        fig.tight_layout(w_pad=2.2)
        return _svg(fig)


def _by_slice(ax, slices, score_range, threshold) -> None:
    shown = slices[:1] + sorted(slices[1:], key=lambda s: -(s["valid_count"] or 0))[:MAX_SLICES - 1]
    hidden = len(slices) - len(shown)
    shown = shown[:1] + sorted(shown[1:], key=lambda s: s["slice"])
    ax.set_title("mean and 95% CI by slice" + (f" ({hidden} smaller slices not shown)" if hidden else ""), loc="left")
    labels = []
    for y, s in enumerate(shown):
        color = BLUE if s["slice"] == "overall" else "#555555"
        if _finite(s["ci_low"], s["ci_high"]):
            ax.plot([s["ci_low"], s["ci_high"]], [y, y], color=color, linewidth=1.6)
        if _finite(s["mean"]):
            ax.plot([s["mean"]], [y], "o", color=color, markersize=5)
        label = s["slice"] if len(s["slice"]) <= 28 else s["slice"][:27] + "…"
        labels.append(f"{label} (n={s['valid_count']})")
    ax.set_yticks(range(len(shown)), labels)
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    limits = _limits(score_range, [v for s in shown for v in (s["mean"], s["ci_low"], s["ci_high"])])
    if limits:
        ax.set_xlim(*limits)
    if _finite(threshold):
        ax.axvline(threshold, color=GREY, linestyle="--", linewidth=0.9, label=f"threshold {threshold:g}")
        ax.legend(loc="lower right", fontsize=7, frameon=False)


# Scores within this share of the largest one's magnitude are one bar: 0.6666666666666665 and
# 0.6666666666666666 are the same score rounded two ways, not two bars 1e-16 apart.
NEAR_EQUAL = 1e-9
# Distinct scores drawn where they lie on the axis while the closest two are at least this share
# of the range apart (a bar is 0.6 of that gap, a few pixels at least); closer, or a range that
# no float holds, as a row of equal bars, one per score, each labelled.
MIN_GAP_SHARE = 1 / 25


@dataclasses.dataclass
class Bars:
    """A distribution as drawn: bar i spans [lefts[i], lefts[i] + widths[i]) and is counts[i]
    high; `ticks` and `labels` name the scores (None: the axis's own ticks), `slanted` where
    they would overlap level."""

    lefts: list[float]
    widths: list[float]
    counts: list[int]
    xlim: tuple[float, float]
    ticks: list[float] | None = None
    labels: list[str] | None = None
    slanted: bool = False


def distribution_bars(histogram: dict[str, Any]) -> Bars:
    """Where the bars of a histogram (reports.data.histograms: distinct scores, or equal bins)
    go, so that every one is drawn whatever the scores: one score, scores equal but for
    rounding (one bar), scores a hair apart beside far ones, a range wider than the largest
    float, thousands of distinct scores (bins), negative scores."""
    buckets = histogram["buckets"]
    if not histogram["discrete"]:
        lo, hi = histogram["lo"], histogram["hi"]
        if hi - lo <= NEAR_EQUAL * max(abs(lo), abs(hi)):  # many scores, all one but for rounding
            return _categories([(lo, sum(b[2] for b in buckets))])
        pad = (hi - lo) * 0.03
        if math.isfinite(lo - pad) and math.isfinite(hi + pad):
            return Bars([b[0] for b in buckets], [b[1] for b in buckets], [b[2] for b in buckets], (lo - pad, hi + pad))
        # wider than the largest float: no linear axis holds it; the bins by number, their edges
        # labelled (on halves, as reports.data computes them)
        half = buckets[0][1] / 2
        index = [round((b[0] / 2 - lo / 2) / half) for b in buckets]
        bins = round((hi / 2 - lo / 2) / half)
        ticks = sorted({0, round(bins / 2), bins})  # few labels: each is wide (-1.5e+308)
        return Bars(index, [1.0] * len(buckets), [b[2] for b in buckets], (-0.6, bins + 0.6), ticks,
                    [f"{2 * (lo / 2 + t * half):.3g}" for t in ticks])
    merged = _merge_near_equal([(float(b[0]), b[2]) for b in buckets])
    values = [v for v, _ in merged]
    if len(values) >= 2:
        span = values[-1] - values[0]
        gap = min(b - a for a, b in zip(values, values[1:]))
        if math.isfinite(span + gap) and gap >= span * MIN_GAP_SHARE:
            lefts = [v - 0.3 * gap for v in values]
            xlim = (values[0] - 0.5 * gap, values[-1] + 0.5 * gap)
            labels = _labels(values)
            if not _labels_fit(values, labels, xlim):  # the axis's own ticks rather than labels over each other
                values, labels = None, None
            return Bars(lefts, [0.6 * gap] * len(lefts), [n for _, n in merged], xlim, values, labels)
    return _categories(merged)


def _merge_near_equal(scores: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """(score, count)s, ascending, with the scores within NEAR_EQUAL of the first of their run
    counted as one, named by the most frequent of them."""
    scores = sorted(scores)
    tolerance = NEAR_EQUAL * max(abs(v) for v, _ in scores)
    runs: list[list[tuple[float, int]]] = []
    for value, count in scores:
        if runs and value - runs[-1][0][0] <= tolerance:
            runs[-1].append((value, count))
        else:
            runs.append([(value, count)])
    return [(max(run, key=lambda s: s[1])[0], sum(n for _, n in run)) for run in runs]


def _categories(scores: list[tuple[float, int]]) -> Bars:
    """One bar per score, side by side, each labelled with its score (slanted where they would overlap)."""
    k = len(scores)
    labels = _labels([v for v, _ in scores])
    return Bars([i - 0.3 for i in range(k)], [0.6] * k, [n for _, n in scores], (-0.6, k - 0.4),
                list(range(k)), labels, slanted=not _labels_fit(range(k), labels, (-0.6, k - 0.4)))


# The distribution's plot is about 190 points wide (a third of a metric panel) and its tick labels
# take about 5 points a character: whether labels side by side overlap.
PLOT_POINTS, LABEL_CHAR_POINTS = 190, 5.2


def _labels_fit(positions, labels: list[str], xlim: tuple[float, float]) -> bool:
    scale = PLOT_POINTS / (xlim[1] - xlim[0])
    return all((b - a) * scale >= (len(la) + len(lb)) / 2 * LABEL_CHAR_POINTS + 4
               for a, b, la, lb in zip(positions, list(positions)[1:], labels, labels[1:]))


def _labels(values: list[float]) -> list[str]:
    """The scores with as many significant digits as tell them apart (6 at least, as %g)."""
    for digits in range(6, 18):
        labels = [f"{v:.{digits}g}" for v in values]
        if len(set(labels)) == len(labels):
            return labels
    return labels


def _distribution(ax, histogram, score_range) -> None:
    ax.set_title("score distribution", loc="left")
    if not histogram or not histogram["buckets"]:
        ax.text(0.5, 0.5, "no valid score", ha="center", va="center", transform=ax.transAxes, color=GREY)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    from matplotlib.ticker import MaxNLocator  # start-up time: Matplotlib only for a report's charts

    bars = distribution_bars(histogram)
    ax.set_axisbelow(True)  # the grid behind the bars, not across them
    ax.bar(bars.lefts, bars.counts, width=bars.widths, align="edge", color=BLUE,
           **({} if histogram["discrete"] else {"edgecolor": "white", "linewidth": 0.4}), gid="distribution-bars")
    ax.set_xlim(*bars.xlim)
    if bars.ticks is not None:
        ax.set_xticks(bars.ticks, bars.labels, **({"rotation": 30, "ha": "right"} if bars.slanted else {}))
    ax.set_ylabel("instances")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(axis="x", visible=False)


def _trend(ax, trend, score_range, run_id) -> None:
    ax.set_title(f"trend over the eval's last {len(trend)} run(s)" if trend else "trend", loc="left")
    if not trend:
        ax.text(0.5, 0.5, "no summary", ha="center", va="center", transform=ax.transAxes, color=GREY)
        return
    xs = list(range(len(trend)))
    means = [t["mean"] if _finite(t["mean"]) else math.nan for t in trend]
    lows = [t["ci_low"] if _finite(t["ci_low"]) else m for t, m in zip(trend, means)]
    highs = [t["ci_high"] if _finite(t["ci_high"]) else m for t, m in zip(trend, means)]
    ax.fill_between(xs, lows, highs, color=BLUE, alpha=0.18, linewidth=0, label="95% CI")
    ax.plot(xs, means, "-o", color=BLUE, markersize=3.5, linewidth=1.3, label="mean")
    current = [i for i, t in enumerate(trend) if t["run_id"] == run_id]
    if current:
        ax.plot([current[-1]], [means[current[-1]]], "o", color=RED, markersize=6, zorder=5, label="this run")
    step = max(1, math.ceil(len(trend) / 6))
    ticks = xs[::step]
    ax.set_xticks(ticks, [str(trend[i]["run_date"]) for i in ticks], rotation=20, ha="right")
    ax.set_xlim(-0.5, len(trend) - 0.5)
    limits = _limits(score_range, lows + highs)
    if limits:
        ax.set_ylim(*limits)
    ax.legend(loc="best", fontsize=7, frameon=False)


def confusion_heatmap(confusion: dict[str, Any]) -> str:
    """A calibration row's confusion ({"categories", "counts"}: rows the human value, columns
    the judge's) as a heat map, each cell's count written in it."""
    categories, counts = confusion["categories"], confusion["counts"]
    k = len(categories)
    size = min(4.2, 1.2 + 0.42 * k)
    with _figure(size, size) as (fig, [ax]):
        ax.grid(False)
        # vector cells (pcolormesh), not imshow: imshow embeds a PNG, which the report's
        # Content-Security-Policy (no data: images) would not show
        edges = [i - 0.5 for i in range(k + 1)]
        ax.pcolormesh(edges, edges, counts, cmap="Blues", vmin=0, edgecolors="white", linewidth=0.5)
        ax.set_aspect("equal")
        peak = max((c for row in counts for c in row), default=0)
        for i, row in enumerate(counts):
            for j, count in enumerate(row):
                ax.text(j, i, str(count), ha="center", va="center", fontsize=7, gid=f"cell-{i}-{j}",
                        color="white" if peak and count > peak / 2 else "#222222")
        labels = [str(c) for c in categories]
        ax.set_xticks(range(k), labels)
        ax.set_yticks(range(k), labels)
        ax.set_xlabel("judge score")
        ax.set_ylabel("human label")
        return _svg(fig)


def pass_curves(metric: str, pass_at: list[dict[str, Any]], pass_all: list[dict[str, Any]]) -> str:
    """Repeated runs: pass@k (some of k runs pass) and pass^k (all k pass) against k,
    overall; the gap between them is how much the runs of a case disagree."""
    with _figure(3.4, 2.2) as (fig, [ax]):
        for curve, colour, label in ((pass_at, GREEN, "pass@k"), (pass_all, RED, "pass^k")):
            points = [(p["k"], p["value"]) for p in curve if _finite(p["value"])]
            if points:
                ax.plot(*zip(*points), "o-", color=colour, markersize=3.5, linewidth=1.4, label=label)
        ax.set_ylim(-0.04, 1.04)
        ax.set_xlabel("k (runs)")
        ax.set_xticks([p["k"] for p in pass_at])
        ax.set_title(metric, loc="left")
        ax.legend(loc="best", fontsize=7, frameon=False)
        fig.tight_layout()
        return _svg(fig)


MODE_COLOURS = ("#2f6db3", "#c0392b", "#2e8b57", "#d4881c", "#7b4fa0", "#1a9aa0", "#b5527f", "#6b8e23",
                "#8c6d31", "#4a6fa5", "#a0522d", "#5f9ea0")


def failure_mode_bars(metric: str, rows: list[dict[str, Any]]) -> str:
    """A metric's failure modes: one bar per slice, split by the share of each mode
    (the modes no slice has left out), with the slice's failure count."""
    slices = sorted({r["slice"] for r in rows}, key=lambda s: (s != "overall", s))[:MAX_SLICES]
    modes = sorted({r["mode"] for r in rows if r["count"]},
                   key=lambda m: -sum(r["count"] for r in rows if r["mode"] == m))
    share = {(r["slice"], r["mode"]): r["share"] or 0.0 for r in rows}
    failures = {r["slice"]: r["failures"] for r in rows}
    with _figure(7.5, 0.9 + 0.32 * len(slices)) as (fig, [ax]):
        left = [0.0] * len(slices)
        for n, mode in enumerate(modes):
            widths = [share.get((s, mode), 0.0) for s in slices]
            ax.barh(range(len(slices)), widths, left=left, color=MODE_COLOURS[n % len(MODE_COLOURS)], label=mode,
                    gid=f"mode-{mode}")
            left = [a + b for a, b in zip(left, widths)]
        ax.set_yticks(range(len(slices)), [f"{s} ({failures[s]} failures)" for s in slices])
        ax.set_ylim(len(slices) - 0.5, -0.5)
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of the metric's failures")
        ax.set_title(f"{metric}: failure modes by slice", loc="left")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7, frameon=False)
        fig.tight_layout()
        return _svg(fig)
