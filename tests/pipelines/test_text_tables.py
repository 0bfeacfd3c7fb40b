"""What the terminal shows of a run (pipelines.reports.text): numbers that agree on one screen
(issue 32, item 5)."""
import pytest
import json

from evalbeam.pipelines.reports.data import judge_accounting
from evalbeam.pipelines.reports.text import format_corrected, format_judge, format_summary


def test_the_summary_ci_has_the_means_decimals():
    """A mean of 0.0007 stood beside a CI printed [0.001, 0.001]."""
    row = {"metric": "m", "slice": "overall", "valid_count": 6, "error_count": 0, "mean": 0.0007, "std": 0.0002,
           "standard_error": 0.0001, "ci_low": 0.00052, "ci_high": 0.00091, "pass_rate": None}
    [line] = [line for line in format_summary([row]).splitlines() if line.startswith("m ")]
    assert line.split()[4:9] == ["0.0007", "0.0002", "0.0001", "[0.0005,", "0.0009]"]


def test_the_judge_line_counts_the_judgments_taken_from_checkpoints():
    """After a resume the judge line said '0 from the cache; 30 calls' for 41 judgments needed:
    the 11 the killed attempt had checkpointed were in `show --json` only."""
    usage = {"fluency": {"requests": 41, "cache_hits": 0, "checkpoint_reused": 11, "calls": 30, "rate_limited": 0,
                         "failures": 0, "prompt_tokens": 900, "output_tokens": 300}}
    run = {"judge_requests": 41, "judge_cache_hits": 0, "judge_calls": 30, "judge_rate_limited": 0, "judge_failures": 0,
           "judge_prompt_tokens": 900, "judge_output_tokens": 300, "judge_estimated_cost": None,
           "judge_usage": json.dumps(usage)}
    accounting = judge_accounting(run)
    assert accounting["checkpoint_reused"] == 11
    lines = format_judge(accounting)
    assert lines[0].startswith("judge: 41 judgments needed, 0 from the cache, 11 from the checkpoints of an "
                               "interrupted attempt; 30 calls (0 rate-limited)")
    assert lines[1].startswith("  fluency: 41 needed, 0 cached, 11 from checkpoints, 30 calls, ")
    # a run that resumed nothing says nothing of checkpoints
    usage["fluency"]["checkpoint_reused"] = 0
    assert "checkpoint" not in "\n".join(format_judge(judge_accounting({**run, "judge_usage": json.dumps(usage)})))


def test_calibration_notes_of_slices_are_printed_not_only_the_overall_rows():
    from evalbeam.pipelines.reports.text import format_calibration

    base = {"metric": "fluency", "n": 2, "bias": None, "mae": None, "spearman": None, "kendall_tau": None,
            "kappa": None, "weighted_kappa": None, "ci_low": None, "ci_high": None, "f1": None,
            "annotator_alpha": None, "unlabelled_count": 0, "unscored_count": 0, "invalid_label_count": 0,
            "invalid_label_example": None}
    rows = [{**base, "slice": "overall", "n": 40, "note": None},
            {**base, "slice": "topic=a", "note": "spearman: every human label is 3 (no variance)"},
            {**base, "slice": "topic=b", "note": None}]
    text = format_calibration(rows)
    assert "  fluency (topic=a): spearman: every human label is 3 (no variance)" in text
    assert "topic=b)" not in text


@pytest.mark.slow
def test_source_lines_of_adk_files_say_a_case_spans_many(demo_run):
    """`source lines 639` beside 4 ADK cases: the lines of pretty-printed JSON, said so."""
    out = demo_run("configs/demo_adk.yaml")[0].stdout
    [line] = [line for line in out.splitlines() if line.startswith("source lines ")]
    assert line.endswith(" holding no record (the lines of the ADK files' JSON: one case spans many)"), line


def test_the_corrected_estimates_stand_beside_the_judge_only_and_labels_only_means():
    row = {"metric": "fluency", "slice": "overall", "n": 120, "corrected_unlabelled": 2880, "human_mean": 3.45,
           "labels_only_ci_low": 3.25, "labels_only_ci_high": 3.65, "judge_only_mean": 3.9121,
           "judge_only_ci_low": 3.87, "judge_only_ci_high": 3.95, "corrected_mean": 3.4412, "corrected_ci_low": 3.3,
           "corrected_ci_high": 3.58, "corrected_lambda": 0.71}
    [line] = [line for line in format_corrected([row]).splitlines() if line.startswith("fluency")]
    assert line.split() == ["fluency", "overall", "120", "2880", "3.9121", "[3.8700,", "3.9500]", "3.4500",
                            "[3.2500,", "3.6500]", "3.4412", "[3.3000,", "3.5800]", "0.710"]
    # a run from before the columns (read as nulls): no table at all, not a table of dashes
    older = {k: (None if k.startswith(("corrected", "judge_only", "labels_only")) else v) for k, v in row.items()}
    assert format_corrected([older]) == ""
