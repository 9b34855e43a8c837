"""The confidence of a recommendation: the 5 % lower bound of Beta(0.5 + s, 0.5 + f)."""

from __future__ import annotations

import numpy as np
import pytest

from skills.confidence import evidence, lower_bound, lower_bounds, posterior_draws

# The API is pinned by these values (issue [7/10]).
PINNED = [
    ((1, 0, 0), 0.2285),
    ((2, 0, 0), 0.4307),
    ((9, 1, 0), 0.6694),
    ((23, 2, 0), 0.7957),
    ((10, 0, 0), 0.8292),
    ((90, 10, 0), 0.8422),
    ((1, 1, 0), 0.0973),
    ((0, 0, 3), 0.1354),
]


@pytest.mark.parametrize(("counts", "expected"), PINNED)
def test_the_bound_of_each_pinned_track_record(
    counts: tuple[int, int, int], expected: float
) -> None:
    successes, failures, partials = counts
    s, f = evidence(successes=successes, failures=failures, partials=partials)
    assert round(lower_bound(successes=s, failures=f), 4) == expected


def test_an_action_that_only_failed_has_no_confidence() -> None:
    assert lower_bound(successes=0, failures=7) == 0.0
    assert lower_bound(successes=0, failures=0) == 0.0


def test_many_track_records_are_bounded_at_once() -> None:
    s = [counts[0] + 0.5 * counts[2] for counts, _ in PINNED]
    f = [counts[1] + 0.5 * counts[2] for counts, _ in PINNED]
    assert np.round(lower_bounds(s, f), 4).tolist() == [value for _, value in PINNED]


def test_more_evidence_at_the_same_rate_raises_the_bound() -> None:
    assert lower_bound(successes=9, failures=1) < lower_bound(successes=90, failures=10)
    assert lower_bound(successes=1, failures=0) < lower_bound(successes=9, failures=1)


def test_the_bound_covers_the_true_rate() -> None:
    """For true success rates p and history lengths n, over 2,000 simulated histories each, the
    share of histories whose reported confidence is at most p: a 5 % lower bound is below the
    truth about 95 % of the time (the exact Jeffreys figures: mean 0.962, lowest cell 0.875 at
    n = 3, p = 0.5); the raw success rate would be below it about half the time."""
    rng = np.random.default_rng(20261201)
    coverage = {}
    for p in (0.1, 0.3, 0.5, 0.7, 0.9):
        for n in (1, 3, 10, 30):
            successes = rng.binomial(n, p, size=2000)
            bounds = lower_bounds(successes, n - successes)
            coverage[(p, n)] = float(np.mean(bounds <= p))
    assert min(coverage.values()) >= 0.85, coverage
    assert np.mean(list(coverage.values())) >= 0.94, coverage
    raw = rng.binomial(3, 0.5, size=2000) / 3
    assert np.mean(raw <= 0.5) < 0.75  # what the bound is for: the raw rate claims too much


def test_a_seeded_draw_is_reproducible() -> None:
    first = posterior_draws([3, 1], [1, 0], rng=np.random.default_rng(7))
    again = posterior_draws([3, 1], [1, 0], rng=np.random.default_rng(7))
    assert first.tolist() == again.tolist()
