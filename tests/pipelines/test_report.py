"""`evalbeam report`, rendered in real headless Chromium (Debian's package, installed by
`make test`), and `show --json` / `runs`: every run made by the real `evalbeam run`."""
import hashlib
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import lxml.html
import numpy as np
import pytest
import yaml
from PIL import Image

from tests.helpers import evalbeam, table
from tests.servers.judge_server import JudgeServer
from tests.e2e.test_compare import cases, write_run

KEY = "AIzaSy-test-key-report-0123456789"


def chromium(tmp_path, *args) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium")
    if binary is None:
        pytest.fail("chromium is not installed: run `make browser` (or `make test`): Debian's chromium package")
    profile = tmp_path / "chromium-profile"
    result = subprocess.run(
        ["timeout", "180", binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}", *map(str, args)],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def render(tmp_path, page, height=2400):
    """The report as Chromium shows it: (its DOM after rendering, its screenshot as RGB pixels)."""
    shot = tmp_path / f"{page.stem}.png"
    chromium(tmp_path, f"--screenshot={shot}", f"--window-size=1280,{height}", page.as_uri())
    loaded = chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())
    # the page's console: nothing refused by its Content-Security-Policy (its own styles
    # included), nothing that failed to load
    assert "CONSOLE" not in loaded.stderr and "Content Security Policy" not in loaded.stderr, loaded.stderr[-3000:]
    return lxml.html.fromstring(loaded.stdout), np.asarray(Image.open(shot).convert("RGB"))


def assert_not_blank(pixels):
    assert pixels.shape[0] > 1000 and pixels.shape[1] == 1280
    colours = np.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colours) > 50, len(colours)  # text, lines, bars: not one flat fill
    inked = (pixels < 235).any(axis=2).mean()
    assert 0.01 < inked < 0.6, inked  # something drawn, and not a black (or error) page


def coloured(pixels, rgb, tolerance=3) -> int:
    return int((np.abs(pixels.astype(int) - np.array(rgb)).max(axis=2) <= tolerance).sum())


class Links(HTMLParser):
    """Every attribute of the page that could make a browser fetch something."""

    def __init__(self):
        super().__init__()
        self.refs, self.tags = [], set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.refs += [(tag, k, v) for k, v in attrs if k in ("src", "href", "xlink:href", "action", "srcset", "poster", "data")]


def assert_self_contained(text):
    links = Links()
    links.feed(text)
    assert not links.tags & {"script", "link", "iframe", "object", "embed", "img", "base", "form"}, links.tags
    assert all(v.startswith("#") for _, _, v in links.refs), [r for r in links.refs if not r[2].startswith("#")]
    # inside any tag (text is escaped: a raw "<" opens a tag)
    assert not re.search(r"(?i)<[^<>]*\s(src|href)\s*=\s*[\"']?\s*(https?:)?//", text)
    assert not re.search(r"(?i)url\(\s*[\"']?\s*(https?:)?//|@import", text)
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', text)
    assert csp and "default-src 'none'" in csp.group(1) and "script-src" not in csp.group(1)


def texts(dom, xpath):
    return [" ".join(el.text_content().split()) for el in dom.xpath(xpath)]


@pytest.mark.browser
def test_report_with_a_planted_regression_renders_in_chromium(tmp_path):
    out = tmp_path / "out"
    evalbeam("run", write_run(tmp_path, "base", cases(False), out), "--set", "run_id=base", "--set", "run_date=2026-11-20")
    evalbeam("run", write_run(tmp_path, "cand", cases(True), out), "--set", "run_id=cand", "--set", "run_date=2026-11-21")

    page = tmp_path / "report.html"
    made = evalbeam("report", "cand", "--compare", "base", "--parquet", out, "-o", page)
    assert "compared cand with base; comparisons written" in made.stdout  # not there yet: computed, and kept
    flagged = {(r["metric"], r["slice"]) for r in table(out / "cand", "comparisons") if r["regression"]}
    assert ("exact_match", "overall") in flagged
    again = evalbeam("report", "cand", "--compare", "base", "--parquet", out, "-o", tmp_path / "again.html")
    assert "compared" not in again.stdout  # read from the comparisons table this time
    text = page.read_text(encoding="utf-8")
    assert (tmp_path / "again.html").read_text(encoding="utf-8") == text  # deterministic, charts included
    assert_self_contained(text)

    dom, pixels = render(tmp_path, page)
    assert_not_blank(pixels)
    assert coloured(pixels, (0xfd, 0xec, 0xea)) > 5000  # the regression rows' highlight is on screen
    assert texts(dom, "//h2") == ["Run", "Compared with base", "Summary", "Metrics", "Metric errors", "Dead letters"]
    assert texts(dom, "//h1") == ["cmp-eval run cand"]
    metrics = {"exact_match", "rouge_1", "latency_in_seconds"}
    assert {h.split(" (")[0] for h in texts(dom, "//section[@id='metrics']/h3")} == metrics
    assert {t for t in texts(dom, "//section[@id='summary']//td[1]")} == metrics

    # the comparison table: the flagged rows first, highlighted, and exactly the flagged ones
    rows = dom.xpath("//section[@id='comparison']//table[contains(@class, 'comparison')]//tr[td]")
    classes = [r.get("class") for r in rows]
    assert len(rows) == 9 and classes[:len(flagged)] == ["regression"] * len(flagged)
    assert "regression" not in classes[len(flagged):]
    shown = {tuple(" ".join(td.text_content().split()) for td in r.xpath("td")[:2]) for r in rows[:len(flagged)]}
    assert shown == flagged
    assert texts(dom, "//p[contains(@class, 'verdict')]") == [
        f"{len(flagged)} regression(s) flagged: exact_match, latency_in_seconds, rouge_1"]

    # the instances that got worse most on exact_match: right in base, wrong now, with both responses
    base = {r["instance_id"]: r["score"] for r in table(out / "base", "metric_results") if r["metric"] == "exact_match"}
    cand = {r["instance_id"]: r["score"] for r in table(out / "cand", "metric_results") if r["metric"] == "exact_match"}
    worse = sorted(i for i in base.keys() & cand.keys() if base[i] > cand[i])
    assert len(worse) > 5
    [section] = [h for h in dom.xpath("//section[@id='comparison']/h3") if h.text_content().startswith("exact_match")]
    listed = section.getnext()
    ids = [c.text_content() for c in listed.xpath(".//strong/code")]
    assert ids == worse[:5]  # ties in how much worse: by instance id
    for run_id in ("base", "cand"):  # both runs' answers, side by side
        responses = {i["instance_id"]: i["response"] for i in table(out / run_id, "instances")}
        assert all(responses[i] in listed.text_content() for i in ids), run_id
    assert "1.0000 → 0.0000" in listed.text_content()

    # the trend reads the eval's earlier runs from their summary tables: two runs so far
    assert "trend over the eval's last 2 run(s)" in dom.xpath("string(//section[@id='metrics'])")

    # runs: the last runs with their headline means and the comparison's flags
    listed = evalbeam("runs", "--parquet", out, "--eval", "cmp-eval").stdout.splitlines()
    assert [line.split()[0] for line in listed[2:]] == ["cand", "base"]
    summary = {s["metric"]: s["mean"] for s in table(out / "cand", "summary") if s["slice"] == "overall"}
    assert f"exact_match {summary['exact_match']:.3f}" in listed[2]
    assert "vs base: REGRESSED exact_match, latency_in_seconds, rouge_1" in listed[2]
    assert listed[3].rstrip().endswith("-")  # base was never compared
    last = evalbeam("runs", "--parquet", out, "--last", "1").stdout.splitlines()
    assert len(last) == 3 and last[2].startswith("cand ")
    assert evalbeam("runs", "--parquet", out, "--last", "0", check=False).returncode == 2


# A score distribution per metric, each awkward to draw (tests/custom_metrics.py: each metric is
# the value of its key in the response; a row without it an error, left out of the distribution):
# metric -> (the score of row k, the bars its chart should show; None: bins, as many as the data fill)
DISTRIBUTIONS = {
    "near_equal": (lambda k, rng: None if k % 10 == 9 else (0.6666666666666665, 0.6666666666666666)[k % 2], 1),
    "one_score": (lambda k, rng: -0.25, 1),
    "far_and_near": (lambda k, rng: (0.0, 0.001, 1000.0)[k % 3], 3),
    "verbosity": (lambda k, rng: (-2, -1, 0, 1, 2)[k % 5] if k % 7 else None, 5),
    "continuous": (lambda k, rng: rng.gauss(0.5, 0.15), None),
    "huge_range": (lambda k, rng: (-1.5e308, 1.5e308)[k] if k < 2 else rng.uniform(-1e307, 1e307), None),
}
MAGENTA = (255, 0, 255)


def bar_bands(pixels) -> list[tuple[int, int]]:
    """The rows of the page (first, last) where MAGENTA is drawn, one (first, last) per run of
    rows without a gap of more than a grid line's few rows: one per chart, as the charts stand
    one below the other, hundreds of rows apart."""
    rows = np.flatnonzero((np.abs(pixels.astype(int) - np.array(MAGENTA)).max(axis=2) <= 3).any(axis=1))
    if not len(rows):
        return []
    breaks = np.flatnonzero(np.diff(rows) > 4)
    return list(zip(rows[np.r_[0, breaks + 1]], rows[np.r_[breaks, len(rows) - 1]]))


@pytest.mark.browser
def test_every_score_distribution_draws_in_chromium(tmp_path):
    """Scores equal but for rounding (0.6666666666666665 and ...6), one score, two close beside
    a far one, -2..2, 2,000 distinct scores, a range wider than the largest float: each metric's
    distribution, as Chromium draws the report, has bars one can see (the bar colour over an area
    of the page), as many as the scores it has. Before, a bar was 0.6 of the smallest gap between
    distinct scores: none drawn for the first, slivers for the third, a crash for the last."""
    import random

    rng = random.Random(11)
    rows = [{"id": f"c{k:04d}", "response": json.dumps({m: f(k, rng) for m, (f, _) in DISTRIBUTIONS.items()})}
            for k in range(2000)]
    data = tmp_path / "scores.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"name": "distributions", "run_id": "d", "input": {"uri": str(data), "id_column": "id"},
              "metrics": [{"name": m, "function": f"tests.custom_metrics:{m}", "inputs": ["response"]}
                          for m in DISTRIBUTIONS],
              "output": {"parquet": str(tmp_path / "out")}}
    path = tmp_path / "distributions.yaml"
    path.write_text(yaml.safe_dump(config))
    evalbeam("run", path)
    page = tmp_path / "distributions.html"
    evalbeam("report", "d", "--parquet", tmp_path / "out", "-o", page)
    text = page.read_text(encoding="utf-8")
    assert_self_contained(text)

    dom, pixels = render(tmp_path, page, height=3400)
    assert_not_blank(pixels)
    panels = [h.split(" (")[0] for h in texts(dom, "//section[@id='metrics']/h3")]
    assert sorted(panels) == sorted(DISTRIBUTIONS)
    shown = dom.xpath("string(//section[@id='metrics'])")
    assert "0.666667" in shown and "0.001" in shown  # the scores named under their bars

    # The same page with the distributions' bars (the blue shapes of each panel's middle plot,
    # as Matplotlib writes them: <g id="axes_2">) filled magenta, a colour nothing else has
    marked = tmp_path / "marked.html"
    marked.write_text(text.replace("</head>", '<style>g[id="axes_2"] path[style*="fill: #2f6db3"] '
                                              "{ fill: #ff00ff !important }</style></head>", 1), encoding="utf-8")
    _, pixels = render(tmp_path, marked, height=3400)
    bands = bar_bands(pixels)
    assert len(bands) == len(panels), (bands, panels)  # one chart with bars per metric, in page order
    for metric, (top, bottom) in zip(panels, bands):
        band = (np.abs(pixels[top:bottom + 1].astype(int) - np.array(MAGENTA)).max(axis=2) <= 3)
        assert band.sum() >= 400, (metric, band.sum())  # an area one can see, not a hairline
        expected = DISTRIBUTIONS[metric][1]
        if expected:  # a score's bar each, apart: the runs of bar colour along the chart's floor
            floor = band[-2]
            runs = int(floor[0]) + int((np.diff(floor.astype(int)) == 1).sum())
            assert runs == expected, (metric, runs)


HOSTILE_SLICE = "<script>alert(1)</script>"


@pytest.mark.browser
def test_report_shows_dead_letters_and_metric_errors_and_escapes_everything(tmp_path):
    rows = [
        {"case": "h1", "ds": HOSTILE_SLICE, "answer": "the cat", "reference": "the cat"},
        {"case": "h2", "ds": "x", "answer": "boom", "reference": "boom"},
        {"case": "h3", "ds": "x", "answer": "<img src=http://example.invalid/x.png>", "reference": "a"},
    ]
    bad = ['{"case": "h4", "answer": "<img src=http://example.invalid/y.png>"',
           json.dumps({"case": "h5", "ds": "x", "answer": "a", "reference": "a", "latency_in_seconds": "slow"}),
           json.dumps({"case": "h6", "ds": "x", "answer": "a", "reference": "a", "latency_in_seconds": "fast"})]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join([json.dumps(r) for r in rows] + bad) + "\n")
    config = {"name": "hostile", "run_id": "h",
              "input": {"uri": str(data), "id_column": "case", "slice_columns": ["ds"], "column_mapping": {"response": "answer"}},
              "metrics": ["exact_match", {"name": "fragile_length", "function": "tests.custom_metrics:fragile_length",
                                          "inputs": ["response"]}],
              "output": {"parquet": str(tmp_path / "out")}}
    path = tmp_path / "hostile.yaml"
    path.write_text(yaml.safe_dump(config))
    evalbeam("run", path)
    page = tmp_path / "hostile.html"
    evalbeam("report", "h", "--parquet", tmp_path / "out", "-o", page)
    text = page.read_text(encoding="utf-8")
    assert_self_contained(text)  # the hostile markup is text, not tags
    assert HOSTILE_SLICE not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text

    dom, pixels = render(tmp_path, page, height=3200)
    assert_not_blank(pixels)
    assert not dom.xpath("//script | //img")
    assert texts(dom, "//h2") == ["Run", "Summary", "Metrics", "Metric errors", "Dead letters"]
    assert "read 6 = scored 3 + dead-lettered 3: reconciles" in dom.xpath("string(//section[@id='run'])")
    assert f"ds={HOSTILE_SLICE}" in dom.xpath("string(//section[@id='metrics'])")  # drawn as text in the SVG

    errors = [[" ".join(td.text_content().split()) for td in r.xpath("td")]
              for r in dom.xpath("//section[@id='metric-errors']//tr[td]")]
    assert errors == [["fragile_length", "1", "ValueError: cannot score an explosion"]]
    by_reason = [[" ".join(td.text_content().split()) for td in r.xpath("td")[:3]]
                 for r in dom.xpath("//section[@id='dead-letters']/table[1]//tr[td]")]
    assert by_reason[0] == ["2", "latency_in_seconds", "must be a number, got '...'"]
    assert by_reason[1][:2] == ["1", "-"] and by_reason[1][2].startswith("invalid JSON")
    first = texts(dom, "//section[@id='dead-letters']/table[2]//tr/td[1]")
    assert first == [f"{data}:{n}" for n in (4, 5, 6)]
    assert "<img src=http://example.invalid/y.png>" in dom.xpath("string(//section[@id='dead-letters'])")


@pytest.mark.slow
def test_show_json_and_report_carry_the_judge_accounting(tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "a", "response": "fine #score=5", "reference": "r"},
        {"id": "b", "response": "meh #score=2", "reference": "r"},
        {"id": "c", "response": "down #fail", "reference": "r"},
        {"id": "d", "response": "also down #fail", "reference": "r"},
    ]))
    out = tmp_path / "out"
    with JudgeServer() as server:
        config = {"name": "judged", "run_id": "j1", "input": {"uri": str(data), "id_column": "id"},
                  "metrics": ["exact_match", "evalbeam_fluency"],
                  "judge": {"base_url": server.url, "max_attempts": 2, "timeout_seconds": 10,
                            "prices": {"gemini-2.5-flash": {"input_per_million": 0.3, "output_per_million": 2.5}}},
                  "output": {"parquet": str(out)}}
        path = tmp_path / "j.yaml"
        path.write_text(yaml.safe_dump(config))
        evalbeam("run", path)
    [run] = table(out / "j1", "runs")
    assert run["judge_calls"] > 0 and run["judge_failures"] == 2

    shown = evalbeam("show", "j1", "--parquet", out).stdout
    assert (f"judge: {run['judge_requests']} judgments needed, {run['judge_cache_hits']} from the cache; "
            f"{run['judge_calls']} calls ({run['judge_rate_limited']} rate-limited), {run['judge_failures']} failed; "
            f"tokens {run['judge_prompt_tokens']} prompt + {run['judge_output_tokens']} output; "
            f"estimated cost ${run['judge_estimated_cost']:.4f}") in shown
    assert "evalbeam_fluency: 2 x judge failed after 2 attempts; last: HTTP 503" in shown

    as_json = json.loads(evalbeam("show", "j1", "--parquet", out, "--json").stdout)
    judge = as_json["judge"]
    assert (judge["requests"], judge["calls"], judge["failures"], judge["cache_hits"]) == (
        run["judge_requests"], run["judge_calls"], run["judge_failures"], run["judge_cache_hits"])
    assert judge["estimated_cost_usd"] == pytest.approx(run["judge_estimated_cost"])
    assert judge["per_metric"] == json.loads(run["judge_usage"])
    assert as_json["counts"]["read_count"] == 4 and as_json["reconciles"] is True
    [error] = as_json["metric_errors"]
    assert (error["metric"], error["n"]) == ("evalbeam_fluency", 2) and error["error"].startswith("judge failed after 2 attempts")
    evalbeam_fluency = next(s for s in as_json["summary"] if s["metric"] == "evalbeam_fluency" and s["slice"] == "overall")
    assert (evalbeam_fluency["valid_count"], evalbeam_fluency["error_count"], evalbeam_fluency["mean"]) == (2, 2, 3.5)
    assert as_json["run_date"] == str(run["run_date"])
    # the sha256 the README promises, in full: recomputable from the runs row's config
    assert as_json["config_digest"] == hashlib.sha256(run["config"].encode("utf-8")).hexdigest()
    assert KEY not in json.dumps(as_json)

    page = tmp_path / "j.html"
    evalbeam("report", "j1", "--parquet", out, "-o", page)
    facts = dict(tuple(" ".join(td.text_content().split()) for td in tr.xpath("td"))
                 for tr in lxml.html.fromstring(page.read_text()).xpath("//section[@id='run']//tr"))
    assert facts["judge calls"].startswith(f"{run['judge_calls']} calls for {run['judge_requests']} judgments needed")
    assert facts["judge cost"] == f"${run['judge_estimated_cost']:.4f} (estimated)"
    assert KEY not in page.read_text()


@pytest.mark.slow
def test_report_without_matplotlib_names_the_extra(tmp_path):
    blocked = tmp_path / "blocked" / "matplotlib"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('matplotlib is not installed here')\n")
    result = evalbeam("report", "any", "--parquet", tmp_path, "-o", tmp_path / "r.html", check=False,
                      path_first=[blocked.parent])
    assert result.returncode == 2
    assert "install the 'report' extra (pip install 'evalbeam[report]')" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "r.html").exists()
    missing = evalbeam("report", "nope", "--parquet", tmp_path, "-o", tmp_path / "r.html", check=False)
    assert missing.returncode == 1 and "no run 'nope'" in missing.stderr


@pytest.mark.browser
@pytest.mark.emulators
def test_report_runs_and_show_from_bigquery(cloud, tmp_path):
    """The same reader against the BigQuery emulator: the report's SQL (histograms, trend,
    worst instances) in BigQuery's dialect, the comparison read from the comparisons table."""
    from tests.emulators.control import BUCKET, PROJECT
    from evalbeam.transforms.local_cloud import bigquery_client

    dataset = f"{PROJECT}.evals_report"
    flags = [f"--temp_location=gs://{BUCKET}/tmp"]
    out = {"bigquery": dataset}
    evalbeam("run", write_run(tmp_path, "base", cases(False), None, {"output": out}), "--set", "run_id=base",
             "--set", "run_date=2026-11-20", *flags)
    evalbeam("run", write_run(tmp_path, "cand", cases(True), None, {"output": out, "compare_with": "previous"}),
             "--set", "run_id=cand", "--set", "run_date=2026-11-21", *flags)

    def rows(sql):
        return [dict(r.items()) for r in bigquery_client(PROJECT).query(sql).result()]

    page = tmp_path / "bq.html"
    made = evalbeam("report", "cand", "--compare", "base", "--bigquery", dataset, "-o", page, *flags)
    assert "compared" not in made.stdout  # compare_with wrote the comparison: read, not recomputed
    text = page.read_text(encoding="utf-8")
    assert_self_contained(text)
    dom, pixels = render(tmp_path, page)
    assert_not_blank(pixels)
    flagged = rows(f"SELECT metric, slice FROM `{dataset}.comparisons` WHERE run_id = 'cand' AND regression")
    shown = [r for r in dom.xpath("//table[contains(@class, 'comparison')]//tr[td]")]
    assert [r.get("class") for r in shown[:len(flagged)]] == ["regression"] * len(flagged)

    worse = rows(f"""SELECT b.instance_id FROM `{dataset}.metric_results` b JOIN `{dataset}.metric_results` r
                     ON b.instance_id = r.instance_id AND b.metric = r.metric
                     WHERE b.run_id = 'base' AND r.run_id = 'cand' AND b.metric = 'exact_match' AND b.score > r.score
                     ORDER BY b.instance_id LIMIT 5""")
    [section] = [h for h in dom.xpath("//section[@id='comparison']/h3") if h.text_content().startswith("exact_match")]
    assert [c.text_content() for c in section.getnext().xpath(".//strong/code")] == [w["instance_id"] for w in worse]
    metrics_text = dom.xpath("string(//section[@id='metrics'])")
    assert "trend over the eval's last 2 run(s)" in metrics_text and "score distribution" in metrics_text

    listed = evalbeam("runs", "--bigquery", dataset, "--eval", "cmp-eval", "--last", "1").stdout.splitlines()
    assert len(listed) == 3 and listed[2].startswith("cand ")
    assert "vs base: REGRESSED exact_match, latency_in_seconds, rouge_1" in listed[2]
    shown = json.loads(evalbeam("show", "cand", "--bigquery", dataset, "--json").stdout)
    assert shown["counts"]["read_count"] == len(cases(True)) and shown["judge"] is None
    assert shown["results"] == f"BigQuery {dataset}"


def test_dead_letter_reasons_are_grouped_by_kind_keeping_words_with_digits():
    """by_reason: the particulars of a reason go (values, repeated ids, line and
    column numbers), what names the kind stays (UTF-8, an escape like \\ud83d)."""
    from evalbeam.pipelines.reports.data import reason_kind

    assert reason_kind("line 12 is not valid UTF-8 (invalid start byte at byte 3)") == \
        "line N is not valid UTF-8 (invalid start byte at byte N)"
    assert reason_kind("field 'r': lone surrogate '\\ud83d' at 5") == "lone surrogate '\\ud83d' at N"
    assert reason_kind("duplicate id 'r12' in column 'id': first seen at d.jsonl:3") == \
        reason_kind("duplicate id 'r7' in column 'id': first seen at d.jsonl:40") == \
        "duplicate id '...' in column 'id': first seen at d.jsonl:N"
    assert reason_kind("field 'latency': must be a number, got 'slow'") == "must be a number, got '...'"
    assert reason_kind("line 3 is 1,073,741,824 bytes, over the limit of 67,108,864 bytes for one record") == \
        "line N is N bytes, over the limit of N bytes for one record"


def test_an_invalid_json_line_says_what_and_where_once():
    import io

    from evalbeam.transforms.parsers import parse_jsonl
    from evalbeam.transforms.records import DeadLetter

    [dead] = [i for i in parse_jsonl("f", io.BytesIO(b'{"id": "a", "response": "unterminated\n')) if isinstance(i, DeadLetter)]
    assert dead.reason == "invalid JSON: Unterminated string starting at: column 25"
