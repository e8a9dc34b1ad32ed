"""The checks that every decoder backend runs on one utterance's scores before decoding it."""

from __future__ import annotations

import numpy as np


class ScoresError(ValueError):
    """Scores a decoder refuses (not a 2-D float array, too few columns, a value that is not finite or beyond
    float32): the utterance's fault, reported as its status "bad scores: ...", never the decoder's."""


def checked_scores(utt_id: str, loglikes: np.ndarray, min_columns: int = 0, first_frame: int = 0) -> np.ndarray:
    """loglikes (T, P) as float32, after checking: a 2-D float array, at least `min_columns` columns when
    T > 0 (column j scores graph input label j + 1, so the graph's largest input label), every value
    finite and within float32's range. Raises ScoresError naming the utterance (and the frame, counted from
    `first_frame`, and column of the first value that is not)."""
    scores = np.asarray(loglikes)
    if scores.ndim != 2 or not np.issubdtype(scores.dtype, np.floating):
        raise ScoresError(f"utterance {utt_id!r} has scores of {scores.dtype} and shape {scores.shape}; they "
                         "must be a 2-D float array (T, P)")
    if scores.shape[0] and scores.shape[1] < min_columns:
        raise ScoresError(f"utterance {utt_id!r} has scores of {scores.shape[1]} columns, but the graph's "
                         f"input labels go up to {min_columns} (column j scores label j + 1): it needs at "
                         f"least {min_columns}")
    if not np.isfinite(scores).all():
        frame, column = (int(i) for i in np.argwhere(~np.isfinite(scores))[0])
        bad = scores[frame, column]
        value = "NaN" if np.isnan(bad) else f"{bad:+}"  # NaN, +inf or -inf
        raise ScoresError(f"utterance {utt_id!r} has {value} at frame {first_frame + frame}, column {column}; "
                         "scores must be finite log-likelihoods")
    limit = np.finfo(np.float32).max
    if scores.dtype.itemsize > 4 and scores.size and np.abs(scores).max() > limit:  # finite, but not in float32
        frame, column = (int(i) for i in np.argwhere(np.abs(scores) > limit)[0])
        raise ScoresError(f"utterance {utt_id!r} has {scores[frame, column]:g} at frame {first_frame + frame}, "
                         f"column {column}, beyond float32's range (±{limit:.3g}), in which scores are decoded")
    return scores.astype(np.float32, copy=False)
