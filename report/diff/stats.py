"""Is a difference beyond the noise? A bootstrap interval of the difference of medians.

Each run gives one value per profiled step (a step's duration, an op's time in the step). The
difference between two runs is the median of NEW's values minus the median of BASE's. Its 95 %
interval is the percentile bootstrap: both samples are resampled with replacement, each on its
own, :data:`RESAMPLES` times, and the 2.5th and 97.5th percentiles of the resampled differences
are the interval's ends (Efron and Tibshirani, *An Introduction to the Bootstrap*, ch. 13). A
difference *exceeds the noise* when the interval does not contain zero.

The generator is seeded, so the same inputs always give the same interval. With fewer than
:data:`MIN_STEPS` values on a side the spread cannot be estimated; the interval is then null and
so is ``exceeds_noise``. Above :data:`MAX_BOOTSTRAP_STEPS` values on a side (resampling would
cost ``RESAMPLES`` times the sample) the interval is the normal one from the McKean-Schrader
standard error of each median (McKean and Schrader, 1984), which the bootstrap approaches there.

The interval covers step-to-step noise within each run. Noise between runs (another process on
the machine, clocks, caches warmed differently) is not in it: two captures of the same code may
differ by more. ``check`` therefore fails only when the whole interval lies above its threshold,
and given several baseline runs it uses :func:`between_runs` instead, whose interval is the spread
between runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 95
MIN_STEPS = 3
SEED = 0
MAX_BOOTSTRAP_STEPS = 1000
_Z = 1.959963984540054  # the normal distribution's 97.5th percentile
METHOD = (
    f"percentile bootstrap of the difference of medians over steps ({CONFIDENCE} % interval, "
    f"{RESAMPLES} resamples of each run's per-step values, seed {SEED}); a difference exceeds "
    "the noise when its interval excludes zero; above "
    f"{MAX_BOOTSTRAP_STEPS} steps a side, a normal interval from the McKean-Schrader standard "
    "errors of the medians"
)


@dataclass(frozen=True)
class Difference:
    """NEW against BASE for one per-step quantity (units as the inputs)."""

    base: float
    new: float
    low: float | None
    high: float | None

    @property
    def delta(self) -> float:
        """NEW's median minus BASE's."""
        return self.new - self.base

    @property
    def exceeds_noise(self) -> bool | None:
        """Whether the interval excludes zero (None when it could not be estimated)."""
        if self.low is None or self.high is None:
            return None
        return self.low > 0 or self.high < 0


def difference(base: list[float], new: list[float]) -> Difference | None:
    """Medians, and the bootstrap interval of NEW - BASE; None when a side has no values."""
    if not base or not new:
        return None
    b_med, n_med = statistics.median(base), statistics.median(new)
    if min(len(base), len(new)) < MIN_STEPS:
        return Difference(b_med, n_med, None, None)
    if max(len(base), len(new)) > MAX_BOOTSTRAP_STEPS:
        half = _Z * math.hypot(_median_se(base), _median_se(new))
        return Difference(b_med, n_med, n_med - b_med - half, n_med - b_med + half)
    rng = np.random.default_rng(SEED)
    b, n = np.asarray(base, dtype=float), np.asarray(new, dtype=float)
    b_boot = np.median(b[rng.integers(0, b.size, (RESAMPLES, b.size))], axis=1)
    n_boot = np.median(n[rng.integers(0, n.size, (RESAMPLES, n.size))], axis=1)
    tail = (100 - CONFIDENCE) / 2
    low, high = np.percentile(n_boot - b_boot, [tail, 100 - tail])
    return Difference(b_med, n_med, float(low), float(high))


def differences(
    pairs: Sequence[tuple[list[float], list[float]]], *, intervals: bool = True
) -> list[Difference | None]:
    """:func:`difference` of each ``(base, new)`` pair, the same numbers, for many pairs at once;
    with ``intervals`` false, the medians alone (``check`` reads no more of further baselines).

    The generator is seeded afresh for each pair, so every pair whose sides have the same sizes
    is resampled with the same indices: those pairs are resampled together, a block at a time
    (one NumPy call per block instead of several per pair: 100,000 ops' series took 200 s one by
    one). ``tests/test_diff_stats.py`` holds the two functions to the same bits.
    """
    if not intervals:
        return [
            Difference(statistics.median(b), statistics.median(n), None, None) if b and n else None
            for b, n in pairs
        ]
    out: list[Difference | None] = [None] * len(pairs)
    by_size: dict[tuple[int, int], list[int]] = {}
    for i, (base, new) in enumerate(pairs):
        sizes = (len(base), len(new))
        if min(sizes) < MIN_STEPS or max(sizes) > MAX_BOOTSTRAP_STEPS:
            out[i] = difference(base, new)
        else:
            by_size.setdefault(sizes, []).append(i)
    tail = (100 - CONFIDENCE) / 2
    for (nb, nn), members in by_size.items():
        rng = np.random.default_rng(SEED)
        b_idx = rng.integers(0, nb, (RESAMPLES, nb))
        n_idx = rng.integers(0, nn, (RESAMPLES, nn))
        block = max(1, _BLOCK_VALUES // (RESAMPLES * max(nb, nn)))
        for first in range(0, len(members), block):
            ids = members[first : first + block]
            b = np.array([pairs[i][0] for i in ids], dtype=float)
            n = np.array([pairs[i][1] for i in ids], dtype=float)
            b_boot, n_boot = _medians(b[:, b_idx]), _medians(n[:, n_idx])
            lows, highs = np.percentile(n_boot - b_boot, [tail, 100 - tail], axis=1)
            for i, low, high in zip(ids, lows.tolist(), highs.tolist()):
                base, new = pairs[i]
                out[i] = Difference(statistics.median(base), statistics.median(new), low, high)
    return out


@dataclass(frozen=True)
class Rows:
    """:func:`difference` of many pairs at once, one entry per pair: the medians and the
    interval's ends (NaN where :func:`difference` gives None: no values on a side, or no
    interval)."""

    base: np.ndarray
    new: np.ndarray
    low: np.ndarray
    high: np.ndarray


def row_differences(base: np.ndarray, new: np.ndarray, *, intervals: bool = True) -> Rows:
    """:func:`difference` of each row of ``base`` against the same row of ``new`` (pairs x
    steps, NaN where a step has no value; the values of a row are the non-NaN ones, in order),
    the same numbers to the bit, with no Python loop over the pairs.

    Rows with the same counts of values on each side are resampled together with the seeded
    indices :func:`difference` draws for those sizes (as :func:`differences`), a block of rows
    at a time; above :data:`MAX_BOOTSTRAP_STEPS` values a side, the McKean-Schrader interval
    of each row from its sorted values."""
    nb, nn = _counts(base), _counts(new)
    b_sorted, n_sorted = np.sort(base, axis=1), np.sort(new, axis=1)  # NaN last
    out = Rows(_row_medians(b_sorted, nb), _row_medians(n_sorted, nn), *_nan(2, len(nb)))
    if not intervals:
        return out
    sizes = np.stack([nb, nn], axis=1)
    wanted = (sizes.min(axis=1) >= MIN_STEPS) if len(nb) else np.zeros(0, dtype=bool)
    for size_b, size_n in np.unique(sizes[wanted], axis=0).tolist():
        rows = np.flatnonzero(wanted & (nb == size_b) & (nn == size_n))
        if max(size_b, size_n) > MAX_BOOTSTRAP_STEPS:
            se_b = _row_median_se(b_sorted[rows], size_b)
            se_n = _row_median_se(n_sorted[rows], size_n)
            # math.hypot, as difference() takes it (NumPy's may differ in the last bit)
            half = _Z * np.array([math.hypot(x, y) for x, y in zip(se_b.tolist(), se_n.tolist())])
            delta = out.new[rows] - out.base[rows]
            out.low[rows], out.high[rows] = delta - half, delta + half
        else:
            b = _compact(base[rows], size_b)
            n = _compact(new[rows], size_n)
            out.low[rows], out.high[rows] = _bootstrap(b, n)
    return out


def _nan(k: int, n: int) -> list[np.ndarray]:
    return [np.full(n, np.nan) for _ in range(k)]


def _counts(values: np.ndarray) -> np.ndarray:
    """The values of each row (those not NaN)."""
    counts: np.ndarray = values.shape[1] - np.isnan(values).sum(axis=1)
    return counts


def _row_medians(ordered: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The median of each row's first ``counts`` values (sorted rows; NaN where none), as
    ``statistics.median`` gives it: the middle value, or the two middle ones' mean."""
    out = np.full(len(counts), np.nan)
    some = np.flatnonzero(counts > 0)
    c = counts[some]
    lo = ordered[some, (c - 1) // 2]
    hi = ordered[some, c // 2]
    out[some] = np.where(c % 2 == 1, lo, (lo + hi) / 2)
    return out


def _compact(values: np.ndarray, size: int) -> np.ndarray:
    """Each row's ``size`` non-NaN values, in their order."""
    if not np.isnan(values).any():
        return values
    first = np.argsort(np.isnan(values), axis=1, kind="stable")
    return np.take_along_axis(values, first, axis=1)[:, :size]


def _row_median_se(ordered: np.ndarray, n: int) -> np.ndarray:
    """:func:`_median_se` of each row of ``n`` sorted values."""
    c = min(max(1, round((n + 1) / 2 - _Z * math.sqrt(n / 4))), n)
    se: np.ndarray = (ordered[:, n - c] - ordered[:, c - 1]) / (2 * _Z)
    return se


def _bootstrap(b: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The interval's ends of each row pair (rows of ``nb`` and ``nn`` values), resampled with
    the indices :func:`difference` draws for those sizes.

    Equal row pairs have equal intervals: each distinct pair is resampled once (an op that
    launches nothing has device times of 0 in every step, and so do thousands of others). The
    distinct pairs go a block at a time, each side's resampled medians found by rank
    (:func:`_resampled_medians`)."""
    nb, nn = b.shape[1], n.shape[1]
    rng = np.random.default_rng(SEED)
    b_idx = rng.integers(0, nb, (RESAMPLES, nb))
    n_idx = rng.integers(0, nn, (RESAMPLES, nn))
    tail = (100 - CONFIDENCE) / 2
    # -0.0 and 0.0 stay apart (np.unique would take them for one value)
    both = np.concatenate([b, n], axis=1)
    distinct, first, which = np.unique(
        both.view(np.int64), axis=0, return_index=True, return_inverse=True
    )
    del distinct
    b, n = b[first], n[first]
    block = max(1, _BLOCK_VALUES // (RESAMPLES * max(nb, nn)))
    low, high = np.empty(len(b)), np.empty(len(b))
    for start in range(0, len(b), block):
        part = slice(start, start + block)
        boot = _resampled_medians(n[part], n_idx) - _resampled_medians(b[part], b_idx)
        low[part], high[part] = np.percentile(boot, [tail, 100 - tail], axis=1)
    which = which.reshape(-1)
    return low[which], high[which]


def _resampled_medians(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``_medians(values[:, idx])`` (rows x resamples), the same numbers, found by rank.

    A resample's k-th smallest value is the row's value of the k-th smallest rank among those
    it drew: so the ranks at a resample's middle depend on the row's order of its values alone,
    and rows that order their values alike (a 4-step row has one of 24 orders) share them. Each
    order's middle ranks are found once, by sorting the ranks it draws; each row's medians are
    then read from its sorted values."""
    if np.isnan(values).any():
        return _medians(values[:, idx])
    order = np.argsort(values, axis=1, kind="stable")
    ordered = np.take_along_axis(values, order, axis=1)
    ranks = np.argsort(order, axis=1)
    orders, which = np.unique(ranks, axis=0, return_inverse=True)
    drawn = np.sort(orders[:, idx], axis=-1)  # orders x resamples x values
    k = values.shape[1]
    which = which.reshape(-1)
    hi: np.ndarray = np.take_along_axis(ordered, drawn[which, :, k // 2], axis=1)
    if k % 2:
        return hi
    lo = np.take_along_axis(ordered, drawn[which, :, k // 2 - 1], axis=1)
    return (lo + hi) / 2  # type: ignore[no-any-return]


def _medians(resampled: np.ndarray) -> np.ndarray:
    """``np.median(resampled, axis=-1)``, the same values: sorting the few values of each resample
    took a quarter of the time ``np.median``'s partition does (which also checks for NaN; none
    comes from JSON, and any NaN goes to ``np.median`` itself)."""
    if np.isnan(resampled).any():
        return np.median(resampled, axis=-1)  # type: ignore[no-any-return]
    ordered = np.sort(resampled, axis=-1)
    half = ordered.shape[-1] // 2
    if ordered.shape[-1] % 2:
        return ordered[..., half]
    return (ordered[..., half - 1] + ordered[..., half]) / 2  # type: ignore[no-any-return]


_BLOCK_VALUES = 1 << 22
"""Resampled values held at a time by :func:`differences` (32 MB)."""


def _median_se(values: list[float]) -> float:
    """McKean-Schrader standard error of a sample's median: the distance between the order
    statistics ``c`` places from either end, ``c = (n + 1)/2 - z sqrt(n/4)``, over ``2 z``."""
    x = sorted(values)
    n = len(x)
    c = min(max(1, round((n + 1) / 2 - _Z * math.sqrt(n / 4))), n)
    return (x[n - c] - x[c - 1]) / (2 * _Z)


BETWEEN_RUNS_METHOD = (
    f"{CONFIDENCE} % prediction interval of one more run's median from the baseline runs' medians "
    "(Student's t with k - 1 degrees of freedom: mean ± t·s·√(1 + 1/k)); NEW's median is "
    "compared with it as another run"
)


def between_runs(base_medians: list[float], new: float) -> Difference:
    """NEW's median against the medians of ``k >= 2`` baseline runs of the same code.

    The step-to-step interval of :func:`difference` does not see what changes between runs (the
    load on the machine, clocks, caches): on a shared runner two captures of one code differ by
    more than it allows. Given several baseline runs, their medians' spread is that noise: if NEW
    is one more run of the baseline's code, its median lies within ``mean ± t s √(1 + 1/k)`` in
    95 % of cases (the prediction interval for a further observation of a normal sample; ``s`` the
    medians' standard deviation, ``t`` Student's 97.5th percentile with ``k - 1`` degrees of
    freedom), the statistical threshold of continuous-benchmarking services such as Bencher
    (https://bencher.dev/docs/explanation/thresholds/). The difference is NEW's median minus the
    baseline runs' mean; its interval is that prediction interval around it.
    """
    from scipy.special import stdtrit  # only with several baselines: its import took 0.7-0.8 s

    k = len(base_medians)
    if k < 2:
        raise ValueError("between_runs needs two or more baseline runs")
    mean = statistics.fmean(base_medians)
    half = float(stdtrit(k - 1, 0.5 + CONFIDENCE / 200)) * statistics.stdev(base_medians)
    half *= math.sqrt(1 + 1 / k)
    delta = new - mean
    return Difference(mean, new, delta - half, delta + half)
