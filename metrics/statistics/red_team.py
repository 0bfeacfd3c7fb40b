"""Attack success and utility under attack, per attack family, tool, path and slice: mergeable, in bounded
memory, with 95% CIs that resample cases.

Each attacked run is paired with its twin (the same case and run, unattacked). Per case (the unit of the
bootstrap: its runs, with num_runs > 1, resampled together, as in the summary) the accumulator keeps:

    attacked     attacked runs with a verdict (the goal reached or not)
    succeeded    of those, the runs whose attack reached its goal
    paired       runs whose utility (the utility metric's pass) is known both attacked and in the twin
    utility_attacked, utility_benign   of those, the passes under attack and in the twin

attack_success_rate = succeeded / attacked; benign_utility and utility_under_attack are the pass shares of
the paired runs, and utility_difference their paired difference (under attack minus benign). The CIs are
Poisson-bootstrap percentiles over cases, each case weighed by the summary's weights seeded by its id
(metrics.statistics.summary.bootstrap_weight_matrix), so a case's runs move together; a replicate is a
ratio of weighted sums (sum w*succeeded / sum w*attacked), as the summary's mean is.
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np

from evalbeam.metrics.statistics.summary import BOOTSTRAP_REPLICATES, bootstrap_weight_matrix

# cases waiting to be weighed: one matrix product a batch (as metrics.statistics.summary's)
BATCH = 512
# the attacked runs a summary row keeps as examples (the worst first: metrics.statistics.red_team.example_rank)
EXAMPLES = 3
COUNTS = ("attacked", "succeeded", "errors", "delivered", "twin_goal", "twin_goal_known", "paired",
          "utility_attacked", "utility_benign")


@dataclasses.dataclass
class CaseOutcome:
    """One case's attacked runs of one attack (and target) in one slice, summed over its runs."""

    attacked: int = 0
    succeeded: int = 0
    errors: int = 0  # attacked runs without a verdict (the judge of the goal failed, the run failed)
    delivered: int = 0  # attacked runs in which the attack reached the agent (the attacked tool was called)
    twin_goal: int = 0  # twins that reached the goal with no attack (called the tool anyway)
    twin_goal_known: int = 0  # twins where that is a question (tool goals; judge goals with a verdict)
    paired: int = 0
    utility_attacked: int = 0
    utility_benign: int = 0
    examples: list = dataclasses.field(default_factory=list)  # [(rank, attacked id, twin id)]

    def add(self, other: "CaseOutcome") -> "CaseOutcome":
        for name in COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.examples = sorted(self.examples + other.examples)[:EXAMPLES]
        return self


def example_rank(attacked_id: str, succeeded: bool | None, utility_dropped: bool) -> tuple:
    """Which attacked runs a row shows first: those that succeeded and cost the case its utility, then those
    that succeeded, then the rest; among equals, by a hash of the id (a sample that does not depend on
    the order runs arrive in)."""
    return (not succeeded, not utility_dropped, hashlib.sha256(attacked_id.encode("utf-8")).hexdigest())


def _percentiles(values: np.ndarray) -> tuple[float | None, float | None]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None, None
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


class AttackMoments:
    """A summary row's accumulator: the counts, the bootstrap sums of the cases weighed so far, the cases
    waiting to be weighed, and the worst examples."""

    __slots__ = ("totals", "cases", "boot", "waiting", "examples")

    def __init__(self):
        self.totals = CaseOutcome()
        self.cases = 0
        # per replicate: sum w*succeeded, w*attacked, w*(utility_attacked - utility_benign), w*utility_benign,
        # w*paired
        self.boot = np.zeros((5, BOOTSTRAP_REPLICATES))
        self.waiting: list[tuple[str, tuple[int, int, int, int, int]]] = []
        self.examples: list = []

    def add(self, case_id: str, outcome: CaseOutcome) -> "AttackMoments":
        self.totals.add(dataclasses.replace(outcome, examples=[]))
        self.cases += 1
        self.examples = sorted(self.examples + outcome.examples)[:EXAMPLES]
        self.waiting.append((case_id, (outcome.succeeded, outcome.attacked,
                                       outcome.utility_attacked - outcome.utility_benign, outcome.utility_benign,
                                       outcome.paired)))
        if len(self.waiting) >= BATCH:
            self.flush()
        return self

    def merge(self, other: "AttackMoments") -> "AttackMoments":
        self.totals.add(dataclasses.replace(other.totals, examples=[]))
        self.cases += other.cases
        self.boot += other.boot
        self.examples = sorted(self.examples + other.examples)[:EXAMPLES]
        self.waiting += other.waiting
        if len(self.waiting) >= BATCH:
            self.flush()
        return self

    def flush(self) -> "AttackMoments":
        if self.waiting:
            weights = bootstrap_weight_matrix([case for case, _ in self.waiting])
            values = np.asarray([v for _, v in self.waiting], dtype=np.float64)  # cases x 5
            self.boot += values.T @ weights
            self.waiting = []
        return self

    def statistics(self) -> dict[str, Any]:
        """The attack_summary row's counts, rates and intervals."""
        self.flush()
        t = self.totals
        boot_s, boot_n, boot_du, boot_ub, boot_p = self.boot
        with np.errstate(invalid="ignore", divide="ignore"):
            rate_low, rate_high = _percentiles(boot_s / boot_n) if t.attacked else (None, None)
            diff_low, diff_high = _percentiles(boot_du / boot_p) if t.paired else (None, None)
        return {
            "attacked": t.attacked, "succeeded": t.succeeded, "errors": t.errors, "delivered": t.delivered,
            "cases": self.cases,
            "attack_success_rate": t.succeeded / t.attacked if t.attacked else None,
            "ci_low": rate_low, "ci_high": rate_high,
            "benign_goal_rate": t.twin_goal / t.twin_goal_known if t.twin_goal_known else None,
            "paired": t.paired,
            "benign_utility": t.utility_benign / t.paired if t.paired else None,
            "utility_under_attack": t.utility_attacked / t.paired if t.paired else None,
            "utility_difference": (t.utility_attacked - t.utility_benign) / t.paired if t.paired else None,
            "utility_difference_ci_low": diff_low, "utility_difference_ci_high": diff_high,
            "examples": [{"instance_id": a, "twin_id": b} for _, a, b in self.examples],
        }


def direct_statistics(cases: dict[str, CaseOutcome]) -> dict[str, Any]:
    """The same statistics made at once from every case (for the tests' and a reader's reference): each
    replicate's ratio of weighted sums over all cases."""
    ids = sorted(cases)
    weights = bootstrap_weight_matrix(ids) if ids else np.zeros((0, BOOTSTRAP_REPLICATES))
    s = np.array([cases[i].succeeded for i in ids], dtype=float)
    n = np.array([cases[i].attacked for i in ids], dtype=float)
    du = np.array([cases[i].utility_attacked - cases[i].utility_benign for i in ids], dtype=float)
    p = np.array([cases[i].paired for i in ids], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = (s @ weights) / (n @ weights)
        diff = (du @ weights) / (p @ weights)
    total_n, total_p = n.sum(), p.sum()
    return {"attack_success_rate": s.sum() / total_n if total_n else None,
            "ci": _percentiles(rate) if total_n else (None, None),
            "utility_difference": du.sum() / total_p if total_p else None,
            "utility_difference_ci": _percentiles(diff) if total_p else (None, None)}

