"""Agreement among raters: Krippendorff's alpha at the interval level, mergeable, for the
annotators of a labelled metric (metrics.statistics.calibration) and the jurors of a jury
(metrics.statistics.summary, the summary's jury_alpha)."""
from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass
class IntervalAlpha:
    """Krippendorff's alpha at the interval level over units (instances) each rated by several
    raters (annotators, or a jury's jurors), as constant-size sums that merge exactly: the
    observed disagreement is a sum over units, the expected one a function of the count, sum
    and sum of squares of the pairable values (units with two values or more). Hand-written
    because the `krippendorff` package takes the whole reliability matrix at once; the tests
    compare this with it."""

    units: int = 0  # units with two values or more
    values: int = 0  # values in those units
    total: float = 0.0
    squares: float = 0.0
    within: float = 0.0  # sum over units of sum_{i != j} (v_i - v_j)^2 / (m - 1)

    def add(self, values: list[float]) -> None:
        """One unit's values (missing ones left out)."""
        if len(values) < 2:
            return
        m, total, squares = len(values), math.fsum(values), math.fsum(v * v for v in values)
        self.units += 1
        self.values += m
        self.total += total
        self.squares += squares
        self.within += 2.0 * (m * squares - total * total) / (m - 1)

    def merge(self, other: "IntervalAlpha") -> "IntervalAlpha":
        return IntervalAlpha(*(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)))

    def value(self, what: str = "value", name: str = "alpha") -> tuple[float | None, str | None]:
        """(alpha, None), or (None, why) when there is no pairable unit or no variation."""
        n = self.values
        if self.units == 0:
            return None, f"no instance with two {what}s: no {name}"
        expected = (2.0 * n * self.squares - 2.0 * self.total ** 2) / (n * (n - 1))
        if expected <= 1e-12 * max(1.0, self.squares / n):
            return None, f"every {what} the same: no {name}"
        return 1.0 - (self.within / n) / expected, None
