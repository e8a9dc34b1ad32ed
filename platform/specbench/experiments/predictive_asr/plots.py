"""Figures of the predictive-ASR job, drawn like the paper's: successful against failed prefetches with the
mean prediction gain (ms) or the predicted words as labels (figures 2 and 4), the mean gain over all
requests against failed prefetches (figure 3), the multi-attempt extension, and success against habit (the habit sweep)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

from specbench.reports.plots import pyplot

LABELS = {"lm": "LM only", "personal": "personal only", "lm_personal": "LM + personal",
          "lm_score": "LM score", "conf": "confidence", "conf_personal": "confidence + personal",
          "net_benefit": "net benefit (P x expected gain >= (1 - P) x lambda)"}
SHOWN = ("lm_personal.conf_personal", "lm_personal.conf", "lm_personal.lm_score", "lm.conf", "lm.lm_score",
         "personal.conf_personal")


def _label(name: str) -> str:
    parts = name.split(".")
    text = f"{LABELS[parts[0]]}, {LABELS[parts[1]]}"
    return text + (f", up to {parts[2][1:]} attempts" if len(parts) > 2 else "")


def _curve(ax: Any, table: pl.DataFrame, y: str, name: str, labels: str | None = None) -> None:
    xs, ys = table["failed_rate"].to_list(), table[y].to_list()
    # dashed for the history-only candidates: with the personal confidence they often coincide with LM + personal
    ax.plot(xs, ys, marker=".", label=_label(name), linestyle="--" if name.startswith("personal.") else "-")
    if labels:
        for i, (x, v, lab) in enumerate(zip(xs, ys, table[labels].to_list())):
            if i % 3 == 0 and lab is not None and not math.isnan(lab):
                ax.annotate(f"{lab:.0f}" if labels == "gain_ms_success" else f"{lab:.1f}", (x, v), fontsize=7,
                            textcoords="offset points", xytext=(3, 3))


def plot_figures(sweeps: dict[str, pl.DataFrame], metrics: dict[str, float],
                 habit: list[dict[str, float]]) -> list[Path]:
    """Write the PNGs into a temporary folder; returns their paths."""
    plt = pyplot()

    out = Path(tempfile.mkdtemp(prefix="specbench-prefetch-"))
    figures = [("fig2_success_vs_failed.png", "success_rate", "gain_ms_success", "successful prefetches"),
               ("fig3_gain_vs_failed.png", "gain_ms_all", None, "mean gain over all requests (ms)"),
               ("fig4_success_vs_failed_words.png", "success_rate", "gain_words_success", "successful prefetches")]
    paths = []
    for filename, y, labels, ylabel in figures:
        fig, ax = plt.subplots(figsize=(7, 5))
        for name in SHOWN:
            if name in sweeps:
                _curve(ax, sweeps[name], y, name, labels if name == SHOWN[0] else None)
        if y == "success_rate":
            ax.axhline(metrics["prefetch.oracle_rate"], color="grey", linestyle="--", label="oracle")
        ax.set_xlabel("failed prefetches (rate of requests)")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / filename, dpi=120)
        plt.close(fig)
        paths.append(out / filename)
    multi = sorted(n for n in sweeps if n.startswith("lm_personal.conf_personal"))
    paths.append(_curves_figure(plt, sweeps, multi, "success_rate", "failed prefetch attempts per request",
                                "successful prefetches", out / "multi_attempt.png"))
    # mean latency saved against responses wasted: the threshold policy, the net-benefit policy, K attempts
    costed = sorted(n for n in sweeps if n.startswith("lm_personal.conf_personal") or n.endswith("net_benefit"))
    paths.append(_curves_figure(plt, sweeps, costed, "gain_ms_all",
                                "failed prefetches (discarded responses) per request",
                                "mean latency saved per request (ms)", out / "cost_aware.png"))
    if habit:
        paths.append(_habit_figure(plt, habit, metrics, out / "habit_curve.png"))
    return paths


def _curves_figure(plt: Any, sweeps: dict[str, pl.DataFrame], names: list[str], y: str, xlabel: str,
                   ylabel: str, path: Path) -> Path:
    """`y` against the failed rate for the configurations `names`, on one axes."""
    fig, ax = plt.subplots(figsize=(7, 5))
    for name in names:
        _curve(ax, sweeps[name], y, name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _habit_figure(plt: Any, habit: list[dict[str, float]], metrics: dict[str, float], path: Path) -> Path:
    """Success against habit: oracle and success at the devel thresholds (left), failed rate and mean gain
    over all requests (right, the gain on its own axis), for LM only, personal only and both (and the cache
    model, the context features and the per-source thresholds on the same candidates), against the realized
    repeat rate."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    x = [r["repeat_rate"] for r in habit]
    names = {"both": "LM + personal", "lm": "LM only", "personal": "personal only"}
    colors = {}
    for key, label in names.items():
        line = left.plot(x, [r[f"{key}.success_rate"] for r in habit], marker="o", label=f"{label}: success")[0]
        colors[key] = line.get_color()
        left.plot(x, [r[f"{key}.oracle_rate"] for r in habit], linestyle=":", color=line.get_color(),
                  label=f"{label}: oracle")
        right.plot(x, [r[f"{key}.failed_rate"] for r in habit], marker="o", color=line.get_color(),
                   label=f"{label}: failed")
    for key, label in {"cache_lm": "cache model", "context": "LM + personal, context features",
                       "by_source": "LM + personal, per-source thresholds"}.items():
        if f"{key}.success_rate" in habit[0]:  # the same candidates as both: the oracle is theirs
            line = left.plot(x, [r[f"{key}.success_rate"] for r in habit], marker="^", linestyle="--",
                             label=f"{label}: success")[0]
            right.plot(x, [r[f"{key}.failed_rate"] for r in habit], marker="^", linestyle="--",
                       color=line.get_color(), label=f"{label}: failed")
    gain = right.twinx()
    for key, label in names.items():
        gain.plot(x, [r[f"{key}.gain_ms_all"] for r in habit], marker="s", linestyle="-.", linewidth=0.8,
                  color=colors[key], label=f"{label}: mean gain")
    gain.set_ylabel("mean gain over all requests (ms)")
    if "prefetch.calibrated_routine_share" in metrics:
        left.axvline(metrics["prefetch.repeat_rate"], color="grey", linestyle="--", label="calibrated population")
        left.axhline(metrics["prefetch.calibration_target_oracle"], color="grey", linestyle=":", linewidth=0.8)
    left.set_xlabel("repeat rate (requests whose text the user said before)")
    left.set_ylabel("rate of evaluated test requests")
    right.set_xlabel("repeat rate")
    right.set_ylabel("failed prefetches at the devel threshold")
    left.legend(fontsize=7)
    right.legend(fontsize=7, loc="upper left")
    gain.legend(fontsize=7, loc="upper right")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
