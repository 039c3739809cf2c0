"""Bootstrap confidence intervals for benchmark pass rates.

olmOCR-Bench's headline score is the unweighted mean of per-category pass
rates, so its interval resamples tests *within* each category (categories are
fixed by design, tests are the sample) and averages the category means.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def bootstrap_mean_of_means(
    groups: Sequence[Sequence[float]],
    n_samples: int,
    rng: np.random.Generator,
    level: float = 0.95,
) -> tuple[float, float] | None:
    """Percentile interval of the mean of group means under within-group resampling.

    Empty groups are left out (as they are from the point estimate). Returns
    ``None`` when there is nothing to resample or ``n_samples`` is 0.
    """
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g)]
    if not arrays or n_samples <= 0:
        return None
    means = np.zeros(n_samples)
    for scores in arrays:
        picks = rng.integers(0, len(scores), size=(n_samples, len(scores)))
        means += scores[picks].mean(axis=1)
    means /= len(arrays)
    alpha = (1.0 - level) / 2.0
    low, high = np.percentile(means, [100 * alpha, 100 * (1 - alpha)])
    return float(low), float(high)
