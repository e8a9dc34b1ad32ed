"""The predictions table of a simulated population: for every partial hypothesis of every evaluated request,
the LM's n-best completions and the user's own earlier recognitions that extend it, with the confidence
features and whether each prediction equals the final hypothesis.

Work is shared where it can be: the LM completes each distinct prefix once (Ray actors; memoized across
calls, passes and jobs through `LmCache`), the personal history is queried once per (request, prefix) as
stateless Ray tasks partitioned by user, and partials of one request that hold the same words share their
predictions (the rows still differ in time).
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from specbench.experiments.predictive_asr.lm_cache import Key, LmCache
from specbench.prediction.history import FALLBACK_LOG_FREQ, personal_predictions
from specbench.runtime import run_tasks
from specbench.stage import STATUS_OK


def request_frame(requests: pa.Table, transcripts: pa.Table) -> pl.DataFrame:
    """Requests joined with their transcripts: one row per request."""
    req = pl.from_arrow(requests.select(["request_id", "user_id", "timestamp_s", "evaluated"]))
    tr = pl.from_arrow(transcripts.select(["request_id", "utt_id", "status", "final_words", "ref_words",
                                           "partials", "end_of_speech_ms", "end_source", "duration_ms"]))
    return req.join(tr, on="request_id", how="left", maintain_order="left")


def _partial_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per partial of every evaluated, transcribed request."""
    ok = frame.filter(pl.col("evaluated") & (pl.col("status") == STATUS_OK))
    return (ok.select(["request_id", "user_id", "timestamp_s", "partials"])
            .with_columns(pl.int_ranges(pl.col("partials").list.len()).alias("partial_index"))
            .explode(["partials", "partial_index"]).drop_nulls("partials")
            .with_columns(pl.col("partials").struct.field("time_ms").cast(pl.Float64).alias("partial_time_ms"),
                          pl.col("partials").struct.field("words").alias("partial_words"),
                          pl.col("partials").struct.field("posteriors").alias("partial_posteriors"))
            .drop("partials")
            .with_columns(pl.col("partial_words").list.join(" ").alias("prefix_key"),
                          pl.col("partial_index").cast(pl.Int32)))


def _personal(frame: pl.DataFrame, queries: pl.DataFrame, shards: int) -> dict[tuple[str, Key], list]:
    """(request_id, prefix) -> [(words, (log_freq, last_seen_s, mean_hour))] from each user's history, as Ray
    tasks over user groups (`prediction.history`).
    An earlier request enters the history when its audio ends (its start + duration, whole seconds up),
    since its final recognition exists only then."""
    available = pl.col("timestamp_s") + (pl.col("duration_ms") / 1000.0).ceil().cast(pl.Int64)
    hist = frame.filter(pl.col("status") == STATUS_OK).select(
        ["user_id", "request_id", available.alias("timestamp_s"), pl.col("final_words").alias("words")])
    users = sorted(set(queries["user_id"].to_list()))
    groups = [set(users[i::shards]) for i in range(min(shards, len(users)))]
    items = [(hist.filter(pl.col("user_id").is_in(list(g))).to_arrow(),
              queries.filter(pl.col("user_id").is_in(list(g))).to_arrow()) for g in groups]
    out: dict[tuple[str, Key], list] = {}
    for table in run_tasks(_query_partition, items, progress=f"history queries for {len(users)} users"):
        for r in table.to_pylist():
            out.setdefault((r["request_id"], tuple(r["prefix"])), []).append(
                (tuple(r["words"]), (r["log_freq"], r["last_seen_s"], r["mean_hour"])))
    return out


def _query_partition(item: tuple[pa.Table, pa.Table]) -> pa.Table:
    return personal_predictions(*item)


NOT_SAID = (FALLBACK_LOG_FREQ, None, None)  # a candidate the user has not said: no time, no hour


def _said(seen: tuple[float, int | None, float | None]) -> dict:
    """A candidate's history columns: its log frequency, when the user last said it, at which mean hour."""
    return {"personal_log_freq": seen[0], "last_said_s": seen[1], "said_mean_hour": seen[2]}


def _candidates(key: Key, lm: list[tuple[Key, float, int]], personal: list[tuple[Key, tuple]],
                scores: dict[tuple[Key, Key], float]) -> list[dict]:
    """The union of the LM n-best and the personal predictions of one (request, prefix)."""
    history = dict(personal)
    rows = []
    for words, log_prob, rank in lm:
        full = key + words
        rows.append({"prediction_words": list(full), "lm_log_prob": log_prob, "lm_rank": rank, "in_lm": True,
                     "in_personal": full in history, **_said(history.get(full, NOT_SAID))})
    in_lm = {key + w for w, _, _ in lm}
    for full, seen in personal:
        if full not in in_lm:
            rows.append({"prediction_words": list(full), "lm_log_prob": scores[(key, full[len(key):])],
                         "lm_rank": -1, "in_lm": False, "in_personal": True, **_said(seen)})
    for r in rows:
        r["source"] = "both" if r["in_lm"] and r["in_personal"] else ("lm" if r["in_lm"] else "personal")
    return rows


def build_predictions(requests: pa.Table, transcripts: pa.Table, cache: LmCache,
                      shards: int = 4) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(predictions, requests) as the prefetch policy reads them (`specbench.prediction.prefetch`).

    Requests: every request of the population with `evaluated`, `status`, `final_words`, `end_of_speech_ms`.
    Predictions: one row per (partial, prediction) of evaluated ok requests, including predictions that add
    no word (the policy never picks them; confidence training drops them)."""
    frame = request_frame(requests, transcripts)
    partials = _partial_rows(frame)
    queries = partials.unique(["request_id", "prefix_key"], maintain_order=True).select(
        ["user_id", "request_id", "timestamp_s", pl.col("partial_words").alias("prefix")])
    personal = _personal(frame, queries, shards) if queries.height else {}
    prefixes = {tuple(p) for p in queries["prefix"].to_list()}
    # every personal prediction's continuation is scored in the same round as the completions (the score of
    # one the LM also completes goes unused: cheaper than a second round of the stage's actors)
    pairs = {(k[1], w[len(k[1]):]) for k, preds in personal.items() for w, _ in preds}
    cache.fill(prefixes, pairs)
    rows = []
    for q in queries.select(["request_id", "prefix"]).iter_rows():
        key = tuple(q[1])
        for r in _candidates(key, cache.completions[key], personal.get((q[0], key), []), cache.scores):
            rows.append({"request_id": q[0], "prefix_key": " ".join(key), **r})
    cands = pl.DataFrame(rows, schema={"request_id": pl.String, "prefix_key": pl.String,
                                       "prediction_words": pl.List(pl.String), "lm_log_prob": pl.Float64,
                                       "lm_rank": pl.Int32, "in_lm": pl.Boolean, "in_personal": pl.Boolean,
                                       "personal_log_freq": pl.Float64, "last_said_s": pl.Int64,
                                       "said_mean_hour": pl.Float64, "source": pl.String})
    finals = frame.select(["request_id", "final_words"])
    preds = (partials.join(cands, on=["request_id", "prefix_key"], how="inner", maintain_order="left")
             .join(finals, on="request_id", how="left", maintain_order="left")
             .with_columns((pl.col("prediction_words").list.len() - pl.col("partial_words").list.len())
                           .cast(pl.Int32).alias("added_words"),
                           (pl.col("prediction_words") == pl.col("final_words")).alias("correct"))
             .drop(["final_words", "prefix_key"]))
    return preds, frame.drop("partials")
