"""Planning a synthetic speech corpus from SLURP text, synthesizing it, and its Parquet manifest.

1. `plan_utterances(CorpusPlan(...))` decides, without audio, which sentence is spoken by which voice at which
   rate and SNR: a `pyarrow.Table` with `PLAN_SCHEMA`. Training sentences come from SLURP's deduplicated
   training text and use only training voices; devel/test sentences (one per unique `slurp_id`) use the
   evaluation voices, which include every held-out voice (`voices.HELD_OUT_VOICES`).
2. `synthesize_shard(rows, corpus_root)` (or `synthesize_row` per row) writes
   ``corpus_root/{split}/{voice-slug}/{utt_id}.wav`` plus a sidecar ``{utt_id}.json`` that records what was
   synthesized, the versions of the programs that made it (the voice's engine and sox, `engine_versions`)
   and the end of speech (measured on the clean speech, before noise, so it cannot be measured again from a
   noisy file). A rerun skips rows whose WAV and matching sidecar exist, re-reading the duration from the WAV,
   and synthesizes again a row whose recorded engine version differs from the installed one (a sidecar
   written before versions were recorded is accepted as is). Failures are reported in `status`, never raised. These are plain functions that
   the runtime can run as Ray tasks over shards.
3. `write_manifest` / `read_manifest` store the synthesized rows as Parquet with `MANIFEST_SCHEMA`;
   `word_times` stays null until forced alignment fills it.

Determinism: every random choice comes from a `numpy.random.Generator` seeded with ``[plan.seed, split]``,
so changing the size of one split does not change the draws of another.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from specbench.checks import check_int, check_range
from specbench.data import slurp
from specbench.data.synthesis import RATE_RANGE, SAMPLE_RATE, read_wav, synthesize
from specbench.data.text_norm import normalize
from specbench.data.voices import HELD_OUT_VOICES, get_voice, voice_names
from specbench.errors import ConfigError, DataError, SpecbenchError
from specbench.stage import failure_status
from specbench.text_files import json_number, json_text, plain_json, replace_text
from specbench.tool_versions import tool_version

__all__ = [
    "CorpusPlan",
    "MANIFEST_SCHEMA",
    "PLAN_SCHEMA",
    "WORD_TIMES_TYPE",
    "plan_utterances",
    "read_manifest",
    "sidecar_key",
    "skipped_counts",
    "synthesize_row",
    "synthesize_shard",
    "write_manifest",
]

SPLITS = ("train", "devel", "test")
# Voices built from one recorded speaker: holding one out of training means holding out all of its group.
SPEAKER_GROUPS: dict[str, str] = {"flite:slt": "cmu-arctic-slt", "festival:slt-hts": "cmu-arctic-slt"}


def speaker_of(voice: str) -> str:
    """The speaker a voice was built from: its `SPEAKER_GROUPS` entry, else the voice itself."""
    return SPEAKER_GROUPS.get(voice, voice)
WORD_TIMES_TYPE = pa.list_(
    pa.struct([("word", pa.string()), ("start_s", pa.float32()), ("end_s", pa.float32())])
)
PLAN_SCHEMA = pa.schema([
    pa.field("utt_id", pa.string(), nullable=False),
    pa.field("slurp_id", pa.int32()),
    pa.field("text", pa.string(), nullable=False),
    pa.field("normalized_text", pa.string(), nullable=False),
    pa.field("voice", pa.string(), nullable=False),
    pa.field("rate", pa.float32(), nullable=False),
    pa.field("snr_db", pa.float32(), nullable=False),
    pa.field("noise_seed", pa.int64(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("audio_path", pa.string(), nullable=False),
])
MANIFEST_SCHEMA = pa.schema(list(PLAN_SCHEMA) + [
    pa.field("duration_s", pa.float32()),
    pa.field("num_samples", pa.int64()),
    pa.field("end_of_speech_s", pa.float32()),
    pa.field("status", pa.string(), nullable=False),
    pa.field("word_times", WORD_TIMES_TYPE),
])
# raise it when synthesis changes what a WAV holds: every WAV is then made again on its next request, and the
# predictive job's transcripts with it (`experiments/predictive_asr/code_key.py`)
SIDECAR_VERSION = 1
SNR_RANGE = (-10.0, 100.0)  # dB of added noise a corpus may ask for (as the predictive job's `asr.snr_db_range`)


@dataclass(frozen=True)
class CorpusPlan:
    """What to synthesize. Lists (from TOML) become tuples; None in `snr_db` means clean (+inf).

    Attributes:
        seed: seeds every random draw (>= 0).
        train_sentences: unique training sentences to use (0 = all 11.5k).
        train_voices: registry names used for training; no held-out voice allowed.
        eval_voices: registry names for devel/test; must include every held-out voice, and no training voice
            nor a voice built from a training voice's speaker (`SPEAKER_GROUPS`: flite:slt and
            festival:slt-hts are one speaker).
        devel_sentences, test_sentences: unique SLURP texts per split (0 = all).
        rates: speaking-rate multipliers drawn from (each in [0.5, 2.0]).
        snr_db: SNRs in dB drawn from; +inf (or None) is clean speech.
        train_copies_per_sentence: voice/rate/SNR draws per training sentence (distinct voices when possible).
    """

    seed: int = 0
    train_sentences: int = 1000
    train_voices: tuple[str, ...] = voice_names(held_out=False)
    eval_voices: tuple[str, ...] = HELD_OUT_VOICES
    devel_sentences: int = 0
    test_sentences: int = 0
    rates: tuple[float, ...] = (0.85, 1.0, 1.15)
    snr_db: tuple[float, ...] = (math.inf, 20.0, 10.0)
    train_copies_per_sentence: int = 2

    def __post_init__(self) -> None:
        for name, lo in (("seed", 0), ("train_sentences", 0), ("devel_sentences", 0), ("test_sentences", 0),
                         ("train_copies_per_sentence", 1)):
            object.__setattr__(self, name, check_int(f"CorpusPlan.{name}", getattr(self, name), lo))
        for name in ("train_voices", "eval_voices"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        self._check_voices()
        try:
            rates = tuple(float(r) for r in self.rates)
            snrs = tuple(math.inf if s is None else float(s) for s in self.snr_db)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"CorpusPlan.rates / snr_db: need numbers ({err})") from None
        check_range("len(CorpusPlan.rates)", len(rates), 1)
        for i, rate in enumerate(rates):
            check_range(f"CorpusPlan.rates[{i}]", rate, *RATE_RANGE)
        if not snrs or any(not (SNR_RANGE[0] <= s <= SNR_RANGE[1] or s == math.inf) for s in snrs):  # NaN too
            raise ConfigError(
                f"CorpusPlan.snr_db: need dB values from {SNR_RANGE[0]:g} to {SNR_RANGE[1]:g}, or inf (clean), "
                f"got {list(self.snr_db)}"
            )
        object.__setattr__(self, "rates", rates)
        object.__setattr__(self, "snr_db", snrs)

    def _check_voices(self) -> None:
        for field_name in ("train_voices", "eval_voices"):
            names = getattr(self, field_name)
            if not names or len(set(names)) != len(names):
                raise ConfigError(f"CorpusPlan.{field_name}: need distinct voice names, got {list(names)}")
            for name in names:
                try:
                    get_voice(name)
                except SpecbenchError as err:
                    raise ConfigError(f"CorpusPlan.{field_name}: {err}") from None
        held = [n for n in self.train_voices if get_voice(n).held_out]
        if held:
            raise ConfigError(
                f"CorpusPlan.train_voices: {held} are held out for devel/test and must never be used in "
                "training. Fix: remove them from train_voices."
            )
        missing = [n for n in HELD_OUT_VOICES if n not in self.eval_voices]
        if missing:
            raise ConfigError(f"CorpusPlan.eval_voices: must include the held-out voices; missing {missing}")
        trained = {speaker_of(n): n for n in self.train_voices}
        heard = {n: trained[speaker_of(n)] for n in self.eval_voices if speaker_of(n) in trained}
        if heard:
            pairs = ", ".join(n if n == t else f"{n} (the speaker of training voice {t})" for n, t in heard.items())
            raise ConfigError(
                f"CorpusPlan.eval_voices: {pairs} also in train_voices = {list(self.train_voices)}: devel/test "
                "must be spoken by voices never heard in training. Fix: remove them from eval_voices (or their "
                "speaker's voices from train_voices)."
            )

    def to_json(self) -> str:
        """The plan as JSON (inf written as the string "inf")."""
        return json_text(asdict(self), sort_keys=True)


def _rng(seed: int, split: str) -> np.random.Generator:
    """The generator of one split: independent of the other splits' sizes."""
    return np.random.default_rng([seed, zlib.crc32(split.encode())])


def _snr_tag(snr: float) -> str:
    """``clean`` for +inf, else ``snr10``, ``snr7p5``, ``snrm5`` (filesystem-safe)."""
    if math.isinf(snr):
        return "clean"
    return "snr" + f"{snr:g}".replace("-", "m").replace(".", "p")


def _row(split: str, index: int, raw: str, norm: str, voice: str, rate: float, snr: float,
         seed: int, slurp_id: int | None) -> dict[str, Any]:
    """One planned utterance (a `PLAN_SCHEMA` row)."""
    slug = get_voice(voice).slug
    rate32, snr32 = float(np.float32(rate)), float(np.float32(snr))
    utt_id = f"{split}-{index:06d}-{slug}-r{round(rate32 * 100):03d}-{_snr_tag(snr32)}"
    return {
        "utt_id": utt_id, "slurp_id": slurp_id, "text": raw, "normalized_text": norm, "voice": voice,
        "rate": rate32, "snr_db": snr32, "noise_seed": zlib.crc32(f"{seed}:{utt_id}".encode()),
        "split": split, "audio_path": f"{split}/{slug}/{utt_id}.wav",
    }


def _plan_train(plan: CorpusPlan, texts: Sequence[str]) -> tuple[list[dict[str, Any]], int]:
    """Training rows (shuffled, truncated, `train_copies_per_sentence` draws each) and the empty count."""
    pairs = [(raw, norm) for raw in dict.fromkeys(texts) if (norm := normalize(raw))]
    skipped = len(dict.fromkeys(texts)) - len(pairs)
    rng = _rng(plan.seed, "train")
    order = rng.permutation(len(pairs))
    if plan.train_sentences:
        order = order[: plan.train_sentences]
    copies, voices = plan.train_copies_per_sentence, plan.train_voices
    rows = []
    for i, idx in enumerate(order):
        raw, norm = pairs[int(idx)]
        picks = rng.choice(len(voices), size=copies, replace=copies > len(voices))
        for k, v in enumerate(picks):
            rate = plan.rates[int(rng.integers(len(plan.rates)))]
            snr = plan.snr_db[int(rng.integers(len(plan.snr_db)))]
            rows.append(_row("train", i * copies + k, raw, norm, voices[int(v)], rate, snr, plan.seed, None))
    return rows, skipped


def _balanced(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """(n,) int indices in [0, k), each used floor(n/k) or ceil(n/k) times, in random order."""
    return rng.permutation(np.arange(n) % k)


def _plan_eval(plan: CorpusPlan, split: str, utts: Sequence[slurp.SlurpUtterance],
               limit: int) -> tuple[list[dict[str, Any]], int]:
    """Devel or test rows: one per unique slurp_id, voices/rates/SNRs balanced; and the empty count."""
    first: dict[int, slurp.SlurpUtterance] = {}
    for u in utts:
        first.setdefault(u.slurp_id, u)
    unique = list(first.values())
    kept = [(u, norm) for u in unique if (norm := normalize(u.sentence))]
    skipped = len(unique) - len(kept)
    rng = _rng(plan.seed, split)
    if limit and limit < len(kept):
        kept = [kept[int(i)] for i in np.sort(rng.choice(len(kept), size=limit, replace=False))]
    n = len(kept)
    v_idx = _balanced(rng, n, len(plan.eval_voices))
    r_idx, s_idx = _balanced(rng, n, len(plan.rates)), _balanced(rng, n, len(plan.snr_db))
    rows = [
        _row(split, i, u.sentence, norm, plan.eval_voices[int(v_idx[i])], plan.rates[int(r_idx[i])],
             plan.snr_db[int(s_idx[i])], plan.seed, u.slurp_id)
        for i, (u, norm) in enumerate(kept)
    ]
    return rows, skipped


def plan_utterances(
    plan: CorpusPlan,
    *,
    training_text: Sequence[str] | None = None,
    eval_utterances: Mapping[str, Sequence[slurp.SlurpUtterance]] | None = None,
) -> pa.Table:
    """The corpus plan as a table (`PLAN_SCHEMA`), train rows first, then devel, then test. No audio.

    `training_text` (raw sentences) and `eval_utterances` ({"devel": [...], "test": [...]}) default to SLURP's
    (`slurp.read_training_text()`, `slurp.read_split`). Sentences whose normalized text is empty are skipped;
    their counts per split are in the schema metadata (`skipped_counts`), with the plan as JSON.
    """
    texts = slurp.read_training_text(deduplicate=True) if training_text is None else training_text
    rows, skipped = _plan_train(plan, texts)
    counts = {"train": skipped}
    for split, limit in (("devel", plan.devel_sentences), ("test", plan.test_sentences)):
        if eval_utterances is not None:
            utts = eval_utterances.get(split, [])
        else:
            utts = slurp.read_split(split)  # type: ignore[arg-type]
        split_rows, counts[split] = _plan_eval(plan, split, utts, limit)
        rows += split_rows
    meta = {
        b"specbench.plan": plan.to_json().encode(),
        b"specbench.skipped_empty": json.dumps(counts).encode(),
    }
    return pa.Table.from_pylist(rows, schema=PLAN_SCHEMA.with_metadata(meta))


def skipped_counts(table: pa.Table) -> dict[str, int]:
    """Sentences skipped per split because their normalized text was empty (from `plan_utterances`)."""
    raw = (table.schema.metadata or {}).get(b"specbench.skipped_empty")
    return {k: int(v) for k, v in json.loads(raw).items()} if raw else {}


def sidecar_key(row: Mapping[str, Any]) -> dict[str, Any]:
    """What determines a row's audio besides the engines' versions (recorded beside it in the sidecar:
    `_engines_changed`); a sidecar whose key differs is stale. A row may carry an optional `pitch_cents` (not
    in the plan schema; the usage requests use it), keyed only when it is not 0."""
    key = {
        "version": SIDECAR_VERSION, "normalized_text": row["normalized_text"], "voice": row["voice"],
        "rate": float(row["rate"]), "snr_db": float(row["snr_db"]), "noise_seed": int(row["noise_seed"]),
    }
    if float(row.get("pitch_cents") or 0.0):
        key["pitch_cents"] = float(row["pitch_cents"])
    return key


def engine_versions(voice: str) -> dict[str, str]:
    """The versions of the programs whose output a row of `voice` is: its engine (espeak-ng, which also drives
    the MBROLA voices; flite; festival) and sox (resampling, pitch shift), read by `tool_version` as the
    graph's hash reads espeak-ng's. A program that cannot run here is left out."""
    programs = (get_voice(voice).engine, "sox")
    return {p: v for p in programs if (v := tool_version(p)) is not None}


def _engines_changed(meta: Mapping[str, Any], engines: Mapping[str, str]) -> bool:
    """Whether a program that made a row's audio has another version now than its sidecar records.

    A sidecar written before the versions were recorded (no "engines") is accepted as is: its WAV came from
    whatever was installed then, and refusing it would synthesize every existing corpus again. A program that
    cannot run here (absent from `engines`) is not compared: nothing here could make that audio again."""
    recorded = meta.get("engines")
    if recorded is None:
        return False
    return not isinstance(recorded, dict) or any(recorded.get(p) != v for p, v in engines.items())


def _done(wav: Path, key: Mapping[str, Any], engines: Mapping[str, str]) -> dict[str, float | int] | None:
    """Measurements of an already synthesized row, or None when it must be (re)done (no WAV or sidecar, a
    sidecar of other inputs, or one that records another version of an engine: `_engines_changed`).

    Duration and sample count are read again from the WAV; the end of speech comes from the sidecar.
    """
    sidecar = wav.with_suffix(".json")
    if not (wav.is_file() and sidecar.is_file()):
        return None
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
        if (not isinstance(meta, dict) or meta.get("key") not in (key, plain_json(key))
                or _engines_changed(meta, engines)):
            return None
        samples, _ = read_wav(wav)
        end_of_speech = json_number(meta["end_of_speech_s"])
    except (ValueError, OSError, DataError, KeyError, TypeError):  # a damaged sidecar: synthesized again
        return None
    if len(samples) != meta.get("num_samples"):
        return None
    return {"duration_s": len(samples) / SAMPLE_RATE, "num_samples": len(samples), "end_of_speech_s": end_of_speech}


def synthesize_row(row: Mapping[str, Any], corpus_root: Path) -> dict[str, Any]:
    """Synthesize one planned row unless its WAV (and sidecar) already exist; never raises.

    Returns the row plus `duration_s` (float32 value, seconds), `num_samples` (int), `end_of_speech_s`
    (float32 value, seconds), `word_times` (None) and `status` (``ok``, or ``ErrorType: message`` with the
    measurements None).
    """
    out = dict(row)
    out.update(duration_s=None, num_samples=None, end_of_speech_s=None, word_times=None)
    try:
        wav = Path(corpus_root) / str(row["audio_path"])
        key = sidecar_key(row)
        engines = engine_versions(str(row["voice"]))
        measured = _done(wav, key, engines)
        if measured is None:
            voice = get_voice(str(row["voice"]))
            res = synthesize(str(row["normalized_text"]), voice, float(row["rate"]), wav,
                             seed=int(row["noise_seed"]), snr_db=float(row["snr_db"]),
                             pitch_cents=float(row.get("pitch_cents") or 0.0))
            measured = {"duration_s": res.duration_s, "num_samples": res.num_samples,
                        "end_of_speech_s": res.end_of_speech_s}
            sidecar = {"key": key, "engines": engines, **measured}
            replace_text(wav.with_suffix(".json"), json_text(sidecar, sort_keys=True))
        out.update(
            duration_s=float(np.float32(measured["duration_s"])),
            num_samples=int(measured["num_samples"]),
            end_of_speech_s=float(np.float32(measured["end_of_speech_s"])),
            status="ok",
        )
    except Exception as err:  # noqa: BLE001 - a failed utterance is reported in its row, never raised
        out["status"] = failure_status(err, "synthesis failed")
    return out


def synthesize_shard(rows: Iterable[Mapping[str, Any]], corpus_root: Path,
                     progress: bool = False) -> list[dict[str, Any]]:
    """`synthesize_row` over `rows` in order (one Ray task per shard); `progress` shows a tqdm bar."""
    rows = list(rows)
    if progress:
        from tqdm import tqdm

        rows = list(tqdm(rows, desc="synthesizing", unit="utt"))
    return [synthesize_row(row, corpus_root) for row in rows]


def write_manifest(rows: Iterable[Mapping[str, Any]] | pa.Table, path: Path) -> pa.Table:
    """Write synthesized rows as Parquet with `MANIFEST_SCHEMA`, atomically; returns the written table.

    Missing optional columns (`word_times`, measurements) become null; `DataError` for rows that do not fit
    the schema or for duplicate `utt_id`s.
    """
    path = Path(path)
    table = rows if isinstance(rows, pa.Table) else None
    try:
        if table is None:
            table = pa.Table.from_pylist(list(rows), schema=MANIFEST_SCHEMA)  # type: ignore[arg-type]
        else:
            table = _conform(table, path)
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as err:
        raise DataError(f"{path}: rows do not fit the manifest schema ({err})") from err
    nulls = [f.name for f in MANIFEST_SCHEMA if not f.nullable and table.column(f.name).null_count]
    if nulls:
        raise DataError(f"{path}: columns {nulls} have null values (every row needs them; status is 'ok' or "
                        "the reason it failed)")
    ids = table.column("utt_id").to_pylist()
    if len(set(ids)) != len(ids):
        dups = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise DataError(f"{path}: duplicate utt_id values, e.g. {dups}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return table


def _conform(table: pa.Table, path: Path) -> pa.Table:
    """`table` with MANIFEST_SCHEMA's columns in order, null `word_times` added when absent, cast."""
    if "word_times" not in table.column_names:
        table = table.append_column("word_times", pa.nulls(table.num_rows, WORD_TIMES_TYPE))
    missing = [n for n in MANIFEST_SCHEMA.names if n not in table.column_names]
    if missing:
        raise DataError(f"{path}: the rows lack manifest columns {missing}")
    meta = table.schema.metadata
    return table.select(MANIFEST_SCHEMA.names).cast(MANIFEST_SCHEMA.with_metadata(meta))


def read_manifest(path: Path) -> pa.Table:
    """Read a manifest; `DataError` naming the file and every missing or mistyped column."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except FileNotFoundError as err:
        raise DataError(
            f"{path}: no such manifest. Fix: run the speech job (`specbench data speech`)."
        ) from err
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"{path}: not a readable Parquet manifest ({err}). {_rewrite_fix(path)}") from err
    problems = []
    for field in MANIFEST_SCHEMA:
        if field.name not in table.column_names:
            problems.append(f"missing column {field.name!r} ({field.type})")
        elif not table.schema.field(field.name).type.equals(field.type):
            found = table.schema.field(field.name).type
            problems.append(f"column {field.name!r} is {found}, expected {field.type}")
    if problems:
        raise DataError(f"{path}: not a speech manifest: {'; '.join(problems)}. {_rewrite_fix(path)}")
    return table


def _rewrite_fix(path: Path) -> str:
    """The fix for a damaged manifest: the speech job writes it again from the synthesized rows."""
    return (f"Fix: run the speech job named {path.parent.name!r} again (`specbench data speech JOB.toml`, "
            "e.g. jobs/speech_quick.toml for the corpus 'quick'); it writes the manifest again from the "
            "corpus's WAVs, synthesizing only what is missing")
