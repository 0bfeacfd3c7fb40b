"""The report's score distributions: every one drawn, with bars wide enough to see, whatever the
scores (pipelines/reports/charts.py, the histograms of pipelines/reports/data.py). The charts are
the SVG Matplotlib writes; the report rendered in Chromium is in test_report.py."""
import math
import random
import re

import lxml.etree
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalbeam.pipelines.reports import charts
from evalbeam.pipelines.reports.data import histograms
from evalbeam.pipelines.results import ParquetResults

SVG = "{http://www.w3.org/2000/svg}"
NEAR = (0.6666666666666665, 0.6666666666666666)  # 2/3 rounded two ways: one score


def discrete(*scores):
    """A histogram of few distinct scores, as report_data.histograms gives it: (score, count)s."""
    values = [v for v, _ in scores]
    return {"discrete": True, "lo": min(values), "hi": max(values), "buckets": [(float(v), None, n) for v, n in scores]}


def binned(scores):
    """A histogram of many distinct scores, as report_data.histograms bins it (20 equal bins)."""
    lo, hi = min(scores), max(scores)
    width = hi / 20 - lo / 20
    counts = {}
    for s in scores:
        b = min(int((s / 2 - lo / 2) / (hi / 2 - lo / 2) * 20), 19)
        counts[b] = counts.get(b, 0) + 1
    return {"discrete": False, "lo": lo, "hi": hi,
            "buckets": [(2 * (lo / 2 + b * (width / 2)), width, n) for b, n in sorted(counts.items())]}


def drawn_bars(histogram):
    """The bars of a distribution as Matplotlib writes them to SVG, drawn as in a metric panel
    (charts.metric_panel: a third of its width): each (left, right, top, bottom) in SVG
    points, and the plotting area's (left, right)."""
    with charts._figure(3.5, 2.7) as (fig, [ax]):
        charts._distribution(ax, histogram, None)
        svg = charts._svg(fig)
    axes = next(g for g in lxml.etree.fromstring(svg.encode()).iter(f"{SVG}g") if g.get("id") == "axes_1")
    paths = list(axes.iter(f"{SVG}path"))

    def box(path):
        points = re.findall(r"([-\d.]+) ([-\d.]+)", path.get("d"))
        xs, ys = [float(x) for x, _ in points], [float(y) for _, y in points]
        return min(xs), max(xs), min(ys), max(ys)

    area = box(paths[0])  # the plotting area's white background comes first
    return [box(p) for p in paths if f"fill: {charts.BLUE}" in (p.get("style") or "")], (area[0], area[1])


RNG = random.Random(1)
AWKWARD = {
    "two scores 1e-16 apart": (discrete((NEAR[0], 7), (NEAR[1], 5)), 1),
    "one score": (discrete((0.5, 9)), 1),
    "one score, zero": (discrete((0.0, 9)), 1),
    "one score, huge": (discrete((1e300, 2)), 1),
    "two close beside a far one": (discrete((0.0, 3), (0.001, 2), (1000.0, 1)), 3),
    "verbosity -2..2": (discrete(*[(v, 2) for v in (-2, -1, 0, 1, 2)]), 5),
    "a 1..5 rubric without 3": (discrete(*[(v, 2) for v in (1, 2, 4, 5)]), 4),
    "near-equal pairs among others": (discrete((0.0, 1), (1 / 3, 1), (0.1 + 0.2 - 0.3 + 1 / 3, 2), *[(v, 1) for v in NEAR], (1.0, 4)), 4),
    "tiny scores, told apart": (discrete((1e-15, 1), (2e-15, 1)), 2),
    "close to one beyond rounding": (discrete((1.0, 1), (1.0 + 1e-8, 1)), 2),
    "a range no float holds": (discrete((-1.5e308, 1), (1.5e308, 1)), 2),
    "thousands of distinct scores": (binned([RNG.gauss(0.5, 0.2) for _ in range(5000)]), None),
    "many scores, all one but for rounding": (binned([1 / 3 + k * 2 ** -54 for k in range(30)]), 1),
    "many scores over 1e-3..1e15": (binned([10 ** RNG.uniform(-3, 15) for _ in range(500)]), None),
    "many scores over -1.5e308..1.5e308": (binned([-1.5e308, 1.5e308, *[k * 1e306 for k in range(-40, 40)]]), None),
}


@pytest.mark.parametrize("case", AWKWARD)
def test_every_distribution_draws_bars_one_can_see(case):
    """Each bar at least 1.5 points wide (of about 200) and inside the plotting area; bars that
    do not overlap; scores equal but for rounding one bar. Before, a bar was 0.6 of the
    smallest gap between distinct scores: 1e-16 wide for 0.6666666666666665 and ...6."""
    histogram, bars = AWKWARD[case]
    boxes, (left, right) = drawn_bars(histogram)
    if bars is not None:
        assert len(boxes) == bars, boxes
    assert boxes
    for box in boxes:
        assert box[1] - box[0] >= 1.5, (box, left, right)
        assert left - 0.01 <= box[0] and box[1] <= right + 0.01
        assert box[3] - box[2] > 0
    edges = sorted(boxes)
    assert all(a[1] <= b[0] + 0.01 for a, b in zip(edges, edges[1:]))


def test_distribution_bars_keep_every_count_and_label_each_score_apart():
    rng = random.Random(5)
    for _ in range(300):
        scale = 10 ** rng.uniform(-12, 12) * rng.choice([1, -1])
        values = [scale * rng.choice([0, 1, 2, 3, 5, 8, 1 / 3, 2 / 3, rng.random()]) for _ in range(rng.randint(1, 12))]
        values += [v * (1 + rng.choice([0, 1e-16, -2e-16, 1e-12])) for v in values[:3]]  # rounded otherwise
        counts = {}
        for v in values:
            counts[v] = counts.get(v, 0) + rng.randint(1, 9)
        bars = charts.distribution_bars(discrete(*counts.items()))
        assert sum(bars.counts) == sum(counts.values())
        span = bars.xlim[1] - bars.xlim[0]
        assert all(w >= span / 60 for w in bars.widths), (values, bars)
        assert all(bars.xlim[0] <= x and x + w <= bars.xlim[1] for x, w in zip(bars.lefts, bars.widths))
        if bars.labels:
            assert len(set(bars.labels)) == len(bars.labels), bars.labels
    near = charts.distribution_bars(discrete((NEAR[0], 1), (NEAR[1], 3)))
    assert (near.counts, near.labels) == ([4], ["0.666667"])
    apart = charts.distribution_bars(discrete((1.0, 1), (1.0 + 1e-8, 1)))
    assert apart.labels == ["1", "1.00000001"]


def test_histograms_leave_out_non_finite_scores_and_bin_a_range_no_float_holds(tmp_path):
    """report_data.histograms on DuckDB: NaN, infinities and nulls are not scores (the pipeline
    writes none; a table written otherwise may hold them), and 20 bins between -1.5e308 and
    1.5e308 are computed without overflowing (before: a NaN bin and a crash)."""
    huge = [-1.5e308, 1.5e308, *[k * 1e306 for k in range(-20, 20)]]
    rows = [("huge", s) for s in huge] + [("huge", math.nan), ("huge", math.inf), ("huge", None)]
    rows += [("near", NEAR[k % 2]) for k in range(10)] + [("near", -math.inf)]
    folder = tmp_path / "out" / "r1" / "metric_results"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"metric": [m for m, _ in rows], "score": [s for _, s in rows]}), folder / "part.parquet")

    got = histograms(ParquetResults(str(tmp_path / "out")), "r1")
    assert got["near"]["discrete"] and got["near"]["buckets"] == [(NEAR[0], None, 5), (NEAR[1], None, 5)]
    h = got["huge"]
    assert not h["discrete"] and (h["lo"], h["hi"]) == (-1.5e308, 1.5e308)
    assert sum(n for *_, n in h["buckets"]) == len(huge)
    assert all(math.isfinite(start) and math.isfinite(width) for start, width, _ in h["buckets"])
    assert h["buckets"][0][0] == -1.5e308 and h["buckets"][-1][0] == pytest.approx(1.5e308 - h["buckets"][0][1])
    assert h["buckets"][0][2] == 1 and h["buckets"][-1][2] == 1  # the two ends alone in the end bins
    boxes, _ = drawn_bars(h)
    assert len(boxes) == len(h["buckets"])
