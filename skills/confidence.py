"""How sure a track record lets us be that an action works: the 5 % lower bound of the success
rate's posterior, Beta(0.5 + s, 0.5 + f) (a Jeffreys prior), with a partial outcome counted
half a success and half a failure.

The bound reads as a success rate that holds with 95 % credibility: 1 success alone gives
0.2285, 10 of 10 gives 0.8292, and an action that has only failed gives 0. All actions of a
recommendation are bounded in one vectorised call (scipy's inverse regularised incomplete
beta), not a bisection per action.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.special import betaincinv

PRIOR = 0.5  # Jeffreys
TAIL = 0.05


def evidence(*, successes: float, failures: float, partials: float) -> tuple[float, float]:
    """(s, f): a partial outcome counts half each way."""
    return successes + 0.5 * partials, failures + 0.5 * partials


def lower_bounds(successes: Sequence[float], failures: Sequence[float]) -> np.ndarray:
    """The bound of each (s, f) pair; 0 where there is no success at all (not even half of
    one), so an action that has only failed never looks like a candidate."""
    s = np.asarray(successes, dtype=float)
    f = np.asarray(failures, dtype=float)
    bounds = betaincinv(PRIOR + s, PRIOR + f, TAIL)
    return np.where(s > 0, bounds, 0.0)


def lower_bound(*, successes: float, failures: float) -> float:
    return float(lower_bounds([successes], [failures])[0])


def posterior_draws(
    successes: Sequence[float], failures: Sequence[float], *, rng: np.random.Generator
) -> np.ndarray:
    """One draw from each posterior (Thompson sampling: a less-proven action wins a share of
    draws in proportion to the chance that it is the better one)."""
    s = np.asarray(successes, dtype=float)
    f = np.asarray(failures, dtype=float)
    return rng.beta(PRIOR + s, PRIOR + f)


def confidence_band(confidence: float, *, width: float = 0.2) -> tuple[float, float]:
    """The band a confidence falls in, as (low, high); 1.0 falls in the last band."""
    bands = round(1 / width)
    index = min(math.floor(confidence / width + 1e-9), bands - 1)
    return round(index * width, 10), round((index + 1) * width, 10)
