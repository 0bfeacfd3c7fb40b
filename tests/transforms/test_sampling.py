"""input.sample's thresholds (transforms.sampling), whatever the order the cases come in and however
the runner splits them among accumulators."""
from __future__ import annotations

import random

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from evalbeam.transforms.sampling import BudgetFn, _per_slice_threshold


def fitting_threshold(cases, budget):
    """The threshold by its definition: the cases in hash order, taken while their judgments fit."""
    total, last = 0, None
    for u, n in sorted(cases):
        if total + n > budget:
            return 0.0 if last is None else last
        total, last = total + n, u
    return 1.0


def combined(fn, parts):
    accumulators = []
    for part in parts:
        acc = fn.create_accumulator()
        for item in part:
            acc = fn.add_input(acc, item)
        accumulators.append(acc)
    return fn.extract_output(fn.merge_accumulators(accumulators))


@pytest.mark.parametrize("seed", range(30))
def test_a_budgets_threshold_is_the_same_however_the_cases_are_split(seed):
    """Random cases (some asking nothing, some more than the budget alone) split at random among 1 to 5
    accumulators: the threshold is the definition's. Before, an accumulator that had cut forgot where:
    another's larger hashes could fill the budget past the cut."""
    rng = random.Random(seed)
    cases = [(rng.random(), rng.choice([0, 1, 2, 3, 7, 40])) for _ in range(rng.randint(1, 60))]
    budget = rng.randint(1, 60)
    parts = [[] for _ in range(rng.randint(1, 5))]
    for case in cases:
        rng.choice(parts).append(case)
    assert combined(BudgetFn(budget), parts) == fitting_threshold(cases, budget)


def test_a_cut_in_one_accumulator_holds_in_the_merge():
    """Budget 10: (0.1, 5) and (0.2, 8) seen by one worker, (0.3, 1) by another: only 0.1 fits."""
    assert combined(BudgetFn(10), [[(0.1, 5), (0.2, 8)], [(0.3, 1)]]) == 0.1
    assert combined(BudgetFn(10), [[(0.5, 11)], [(0.6, 1)]]) == 0.0  # the first case alone is over
    assert combined(BudgetFn(10), [[(0.5, 4)], [(0.6, 6)]]) == 1.0  # all fit


def test_per_slice_thresholds_are_each_slices_nth_smallest_past_the_combines_buffer():
    """40 and 25 cases in two slices, 3 a slice: the threshold is each slice's third smallest hash
    (a callable CombinePerKey, compacting its buffer every 10 inputs, gave a larger one)."""
    rng = random.Random(4)
    hashes = {"a": [rng.random() for _ in range(40)], "b": [rng.random() for _ in range(25)]}
    with TestPipeline() as p:
        out = (p | beam.Create([(k, u) for k, us in hashes.items() for u in us])
               | beam.combiners.Top.SmallestPerKey(3) | beam.Map(_per_slice_threshold))
        assert_that(out, equal_to([(k, sorted(us)[2]) for k, us in hashes.items()]))
