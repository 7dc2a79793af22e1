"""Megatron-LM data blends, as its users write them and as it trains them: the spec
(``--data-path W1 P1 W2 P2 ...``, ``--data-args-path FILE``, ``--per-split-data-args-path
FILE``), and, from each source's exact `LengthHistogram`, the samples Megatron draws from
each source, the epochs that makes, each source's effective token share against its
configured weight, and the histogram of the blend as trained (whose bucket table the API
attaches). Pure: histograms in, numbers out.

The semantics follow Megatron-LM (github.com/NVIDIA/Megatron-LM, read at commit d98e8a6):

- ``megatron/core/datasets/utils.py`` ``get_blend_from_list``: an odd number of items are
  all prefixes, without weights; an even number are (weight, prefix) pairs, unless no
  first item of a pair is a number (then all are prefixes). Prefixes are stripped.
  ``normalize``: ``w / sum(w)`` in float64.
- ``megatron/training/utils/common_utils.py`` ``get_blend_and_blend_per_split``:
  ``--data-args-path`` is the file's text split on whitespace; ``--per-split-data-args-path``
  is JSON with ``train``, ``valid`` and ``test`` keys, each a list or a string (split on
  whitespace) or null.
- ``megatron/core/datasets/blended_megatron_dataset_builder.py``: with weights, each
  dataset is asked for ``ceil(size * w)`` samples (``_get_size_per_split_per_dataset``) and
  built with ``ceil(ceil(size * w) * 1.005)`` (``mid_level_dataset_surplus``), and the
  blend is ``sum(ceil(size * w))`` samples long, marginally more than ``size``. Without
  weights, each dataset is built for one epoch, the weights are the datasets' lengths and
  the blend is ``min(size, sum of the lengths)`` long. One prefix is no blend: its dataset
  gives all ``size`` samples.
- ``megatron/core/datasets/blended_dataset.py``: every weight must be positive, weights are
  normalized again, and ``helpers.build_blending_indices`` (``helpers.cpp``) assigns the
  samples greedily (see `gpu_profiler.kernels.blend`); a dataset asked for more samples
  than it was built with raises ``IndexError``.

What a "sample" is: by default, one of the histogram's samples (a row, a document, a
Megatron sequence), as in datasets whose samples are whole sequences (SFT, and any
`MegatronDataset` whose length is its number of sequences). With ``seq_length``, a window
of Megatron's `GPTDataset` (``megatron/core/datasets/gpt_dataset.py``): each source's
documents are concatenated, epoch after epoch as many as its samples need, and cut into
windows of ``seq_length`` tokens (plus the next one, the extra token of
``add_extra_token_to_sequence``); one epoch makes ``(tokens - 1) // seq_length`` windows
(``num_samples_per_epoch``), and every window is ``seq_length`` new tokens, so a source's
token share is its sample share by construction and its epochs are the tokens drawn over
its tokens. Without weights each dataset is built for one epoch of windows.

The blend as trained: a source drawn ``d = q * n + r`` times (``n`` its samples) gives
``q`` whole copies of its histogram and, of its last, partial epoch, the expected counts
``r * count / n`` of every length rounded so that exactly ``r`` samples are added
(cumulatively: see `repeated`). Which ``r`` samples a shuffle picks is unknown; their
expected lengths are what any bucket or token number can use. Every token number of a
source (``tokens_drawn``, ``token_share``) is that histogram's.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpu_profiler.errors import ProfilerError
from gpu_profiler.frozen import frozen
from gpu_profiler.histogram import LengthHistogram, merge

SCHEMA = "gpu-profiler/blend/v1"
#: Megatron-LM's per-split datasets, in the order of its ``Split`` enum.
SPLITS = ("train", "valid", "test")
#: ``BlendedMegatronDatasetConfig.mid_level_dataset_surplus``'s default.
SURPLUS = 0.005
#: A source whose token share is this many times its weight (or less than its inverse)
#: is warned about.
SHARE_FACTOR = 2.0
#: A source repeated more than this many epochs is warned about (default).
WARN_EPOCHS = 4.0
#: The largest data-args file read (its text is a list of paths and weights).
MAX_ARGS_BYTES = 64 << 20


@frozen
class BlendSpec:
    """A blend as Megatron-LM reads it: its prefixes (paths) and their weights, as given
    (None: no weights), and where it came from (``form``: ``data-path``,
    ``data-args-path`` or ``per-split-data-args-path``, with its ``split``)."""

    prefixes: tuple[str, ...]
    weights: tuple[float, ...] | None
    form: str = "data-path"
    split: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Its JSON form."""
        return {"form": self.form, "split": self.split, "prefixes": list(self.prefixes),
                "weights": None if self.weights is None else list(self.weights)}


def number(text: str) -> float | None:
    """``text`` as Megatron-LM reads a weight (``float``), or None when it is no number."""
    try:
        return float(text)
    except ValueError:
        return None


def parse_blend(items: Sequence[str], form: str = "data-path",
                split: str | None = None) -> BlendSpec:
    """``items`` (``--data-path``'s words) read as ``get_blend_from_list`` reads them; a
    spec Megatron would refuse or misread is a one-line `ProfilerError`: no items, a
    weight that is not a number where others are, a weight that is not finite and
    positive (``BlendedDataset`` asserts every weight > 0)."""
    where = f"--{form}" + (f" ({split})" if split else "")
    items = [str(i) for i in items]
    if not items:
        raise ProfilerError(f"{where}: the blend is empty: give PATH, or WEIGHT PATH pairs")
    if len(items) % 2:
        prefixes, weights = items, None
    else:
        raw = items[0::2]
        numbers = [number(w) for w in raw]
        if all(n is None for n in numbers):
            prefixes, weights = items, None
        elif any(n is None for n in numbers):
            i = next(i for i, n in enumerate(numbers) if n is None)
            raise ProfilerError(
                f"{where}: weight {raw[i]!r} of pair {i + 1} is not a number (write WEIGHT "
                f"PATH pairs, or paths alone)")
        else:
            prefixes, weights = items[1::2], [float(n) for n in numbers if n is not None]
    prefixes = [p.strip() for p in prefixes]
    if weights is not None:
        for i, w in enumerate(weights):
            if not math.isfinite(w) or w <= 0:
                raise ProfilerError(
                    f"{where}: weight {raw[i]!r} of {prefixes[i]} must be a positive number "
                    f"(Megatron-LM's BlendedDataset requires every weight > 0)")
    return BlendSpec(tuple(prefixes), None if weights is None else tuple(weights), form, split)


def _read_text(path: str | Path, flag: str) -> str:
    p = Path(path)
    try:
        if p.stat().st_size > MAX_ARGS_BYTES:
            raise ProfilerError(f"{flag} {path}: larger than {MAX_ARGS_BYTES >> 20} MiB")
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ProfilerError(f"{flag} {path}: not UTF-8 text ({e.reason})") from None
    except OSError as e:
        raise ProfilerError(f"{flag} {path}: {e.strerror or e}") from None


def read_data_args(path: str | Path) -> BlendSpec:
    """A ``--data-args-path`` file: its words (split on whitespace) as ``--data-path``."""
    return parse_blend(_read_text(path, "--data-args-path").split(), "data-args-path")


def read_per_split_data_args(path: str | Path, split: str = "train") -> BlendSpec:
    """One split of a ``--per-split-data-args-path`` JSON file (``train``, ``valid`` and
    ``test`` keys, each a list of words, a string of them, or null)."""
    flag = "--per-split-data-args-path"
    if split not in SPLITS:
        raise ProfilerError(f"{flag}: split must be one of {', '.join(SPLITS)}, got {split!r}")
    try:
        d = json.loads(_read_text(path, flag))
    except json.JSONDecodeError as e:
        raise ProfilerError(f"{flag} {path}: not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(d, dict) or any(k not in d for k in SPLITS):
        raise ProfilerError(f"{flag} {path}: a JSON object with keys train, valid and test "
                            "is expected (as Megatron-LM reads it)")
    value = d[split]
    if value is None:
        raise ProfilerError(f"{flag} {path}: the {split} split has no blend (null)")
    if isinstance(value, str):
        value = value.split()
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float))
                                              and not isinstance(v, bool) for v in value):
        raise ProfilerError(f"{flag} {path}: {split} must be a list of weights and paths, "
                            "or a string of them")
    return parse_blend([str(v) for v in value], "per-split-data-args-path", split)


def normalize(weights: Sequence[float] | np.ndarray) -> np.ndarray:
    """Megatron-LM's ``normalize``: ``w / sum(w)`` in float64."""
    w = np.array(weights, dtype=np.float64)
    return w / np.sum(w)


def split_rows(split: str, which: str, rows: int) -> tuple[int, int]:
    """The rows ``[beg, end)`` of a dataset of ``rows`` rows that Megatron-LM's ``--split``
    (``"969,30,1"``) gives its split ``which`` (train, valid, test):
    ``parse_and_normalize_split`` (the numbers in the text, padded to three, normalized),
    ``convert_split_vector_to_split_matrix`` (their running sums) and
    ``_build_megatron_dataset_splits`` (``int(round(end * rows))``). A `ProfilerError` for
    text Megatron would refuse or crash on, and for a split of no width (Megatron builds
    none)."""
    found = re.findall(r"[.0-9]+", split)
    try:
        ratios = [float(x) for x in found]
    except ValueError:
        ratios = []
    if not ratios or len(ratios) > len(SPLITS) or not all(map(math.isfinite, ratios)) \
            or sum(ratios) <= 0:
        raise ProfilerError(f"--megatron-split {split!r}: write Megatron-LM's --split, up to "
                            "three non-negative ratios of train, valid and test (969,30,1)")
    vector = normalize(ratios + [0.0] * (len(SPLITS) - len(ratios))).tolist()
    ends = [0.0, *itertools.accumulate(vector)]
    i = SPLITS.index(which)
    if ends[i] == ends[i + 1]:
        raise ProfilerError(f"--megatron-split {split}: the {which} split holds no rows")
    return int(round(ends[i] * float(rows))), int(round(ends[i + 1] * float(rows)))


def target_sizes(weights: np.ndarray, size: int, surplus: float = 0.0) -> list[int]:
    """``_get_size_per_split_per_dataset``: ``ceil(ceil(size * w) * (1 + surplus))`` per
    dataset (Python floats, as there)."""
    return [int(math.ceil(math.ceil(size * float(w)) * (1 + surplus))) for w in weights]


def blending_counts(weights: np.ndarray, size: int) -> np.ndarray:
    """The samples ``build_blending_indices`` takes from each dataset in ``size`` steps
    (``weights`` normalized), by the compiled kernel `gpu_profiler.kernels.blend`."""
    from gpu_profiler import native

    counts = np.zeros(len(weights), dtype=np.int64)
    if size > 0:
        native.kernel("blending_counts")(np.ascontiguousarray(weights, np.float64), int(size),
                                         counts)
    return counts


def _mul(a: np.ndarray, k: int) -> np.ndarray:
    """``a * k`` exactly (object integers where int64 could overflow)."""
    if a.size and int(a.max()) * k >= 2 ** 62:
        return a.astype(object) * k
    return a * k


def repeated(hist: LengthHistogram, drawn: int) -> LengthHistogram:
    """``hist`` drawn ``drawn`` times: ``q`` whole copies for the whole epochs, and the
    partial epoch's ``r`` samples as the expected counts ``r * count / n`` rounded
    cumulatively (each length gets ``round(r * cum / n)`` less the shorter lengths' share,
    ``cum`` the samples up to it, halves up; the above-cap samples one bin after the rest,
    their tokens pro rata, floored). Every count is its expectation rounded down or up,
    they add up to exactly ``r``, and the tokens are within half the span of lengths of
    their expectation (largest remainder, whose ties fall on the shortest lengths, can be
    off by far more). Nulls and invalid lengths are no samples and are left out."""
    n = hist.valid
    if drawn < 0 or (n == 0 and drawn):
        raise ValueError("cannot draw samples from an empty histogram")
    q, r = divmod(drawn, n) if n else (0, 0)
    cum = np.cumsum(np.append(hist.counts, hist.above_count))
    if r:
        big = int(cum[-1]) * r >= 2 ** 62  # exact either way: object integers past int64
        c = cum.astype(object) if big else cum
        rounded = np.asarray((2 * r * c + n) // (2 * n), dtype=np.int64)
        part = np.diff(rounded, prepend=0)
    else:
        part = np.zeros(cum.size, dtype=np.int64)
    counts = _mul(hist.counts, q).astype(np.int64) + part[:-1]
    above = q * hist.above_count + int(part[-1])
    above_tokens = q * hist.above_tokens + (
        int(part[-1]) * hist.above_tokens // hist.above_count if hist.above_count else 0)
    return LengthHistogram(counts, above, above_tokens,
                           hist.above_min if above else -1, hist.above_max if above else -1)


@frozen
class BlendSource:
    """One source of a blend: what it holds and what the blend takes from it.

    ``weight`` is the configured weight (None without weights), ``normalized_weight`` the
    share of samples Megatron aims for; ``requested`` its ``ceil(size * w)`` and ``built``
    that with the 0.5% surplus (None without weights); ``drawn`` the samples the blend
    takes, ``epochs`` = drawn / samples; ``tokens_drawn`` their tokens (whole epochs
    exact, the last partial one expected), ``token_share`` = its tokens_drawn / all the
    blend's, ``share_ratio`` = token_share / normalized_weight. With GPTDataset windows
    (``seq_length``), ``windows`` is one epoch's windows, the drawn samples are windows,
    ``tokens_drawn`` = drawn x seq_length and ``epochs`` = tokens_drawn / tokens."""

    index: int
    path: str
    weight: float | None
    normalized_weight: float
    samples: int
    tokens: int
    mean_len: float | None
    requested: int | None
    built: int | None
    drawn: int
    epochs: float
    sample_share: float
    tokens_drawn: int
    token_share: float
    share_ratio: float | None
    windows: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Its JSON form."""
        return dict(self.__dict__)


@frozen
class Blend:
    """A blend as trained: ``train_samples`` asked for (from ``train_tokens`` when that was
    given), ``size`` the blend's length (what Megatron draws), each source, the histogram of
    every sample drawn, and warnings; ``table`` is the bucket table of ``histogram`` (set
    by `gpu_profiler.api.blend`)."""

    spec: BlendSpec
    train_samples: int
    train_tokens: int | None
    size: int
    sources: tuple[BlendSource, ...]
    histogram: LengthHistogram
    warnings: tuple[str, ...] = ()
    warn_epochs: float = WARN_EPOCHS
    table: Any = None
    #: GPTDataset windows of this many tokens (None: the histograms' samples)
    seq_length: int | None = None
    #: Megatron-LM's ``--split`` the sources' rows were cut by, and the split taken
    megatron_split: str | None = None
    data_split: str | None = None

    @property
    def tokens_drawn(self) -> int:
        """Every token the blend trains on."""
        return sum(s.tokens_drawn for s in self.sources)

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON interface (``schema`` names its version)."""
        ratios = [s.share_ratio for s in self.sources if s.share_ratio is not None]
        d: dict[str, Any] = {
            "schema": SCHEMA, "spec": self.spec.to_dict(),
            "train_samples": self.train_samples, "train_tokens": self.train_tokens,
            "size": self.size, "seq_length": self.seq_length,
            "megatron_split": self.megatron_split, "data_split": self.data_split,
            "tokens_drawn": self.tokens_drawn,
            "max_epochs": max(s.epochs for s in self.sources),
            "min_share_ratio": min(ratios) if ratios else None,
            "max_share_ratio": max(ratios) if ratios else None,
            "sources": [s.to_dict() for s in self.sources],
            "warnings": list(self.warnings)}
        if self.table is not None:
            d["table"] = self.table.to_dict()
        return d


def samples_for_tokens(spec: BlendSpec, hists: Sequence[LengthHistogram],
                       train_tokens: int, seq_length: int | None = None) -> int:
    """Training samples for ``train_tokens``: the fewest whose expected tokens at the
    blend's weights (the sources' lengths without weights) reach it,
    ``ceil(train_tokens / sum(w * mean))``; of GPTDataset windows, ``ceil(train_tokens /
    seq_length)``."""
    if train_tokens <= 0:
        raise ProfilerError(f"--train-tokens must be positive, got {train_tokens}")
    w = _weights(spec, hists)
    per_sample = float(seq_length) if seq_length else float(
        sum(wi * (h.tokens / h.valid) for wi, h in zip(w, hists, strict=True)))
    if per_sample <= 0:
        raise ProfilerError("--train-tokens: the blend's samples hold no tokens")
    return max(1, math.ceil(train_tokens / per_sample))


def _weights(spec: BlendSpec, hists: Sequence[LengthHistogram]) -> np.ndarray:
    if spec.weights is None:
        return normalize([h.valid for h in hists])
    return normalize(normalize(spec.weights))


def windows(hist: LengthHistogram, seq_length: int) -> int:
    """GPTDataset's windows in one epoch of ``hist``'s documents: ``(tokens - 1) //
    seq_length`` (``num_samples_per_epoch``, with ``add_extra_token_to_sequence``)."""
    return max(hist.tokens - 1, 0) // seq_length


def blend(spec: BlendSpec, hists: Sequence[LengthHistogram], train_samples: int | None = None,
          train_tokens: int | None = None, warn_epochs: float = WARN_EPOCHS,
          seq_length: int | None = None) -> Blend:
    """The blend ``spec`` of the sources whose histograms are ``hists`` (in its order),
    trained for ``train_samples`` (or ``train_tokens``, see `samples_for_tokens`; default:
    every source's samples added up, one pass of the union), as Megatron-LM builds it (see
    the module docstring); with ``seq_length``, its samples are GPTDataset windows."""
    if len(hists) != len(spec.prefixes):
        raise ValueError("one histogram per prefix")
    if seq_length is not None and (isinstance(seq_length, bool) or not isinstance(
            seq_length, (int, np.integer)) or not 0 < seq_length <= 1 << 30):
        raise ProfilerError(f"--seq-length must be a positive integer, got {seq_length!r}")
    for p, h in zip(spec.prefixes, hists, strict=True):
        if h.valid == 0:
            raise ProfilerError(f"{p}: no samples to blend")
        if seq_length and h.tokens < 2:
            raise ProfilerError(f"{p}: {h.tokens} tokens: no window of GPTDataset (a window "
                                "needs two tokens, the last its next token)")
    if train_samples is not None and train_tokens is not None:
        raise ProfilerError("give --train-samples or --train-tokens, not both")
    per_epoch = [windows(h, seq_length) for h in hists] if seq_length else \
        [h.valid for h in hists]
    if train_tokens is not None:
        train_samples = samples_for_tokens(spec, hists, train_tokens, seq_length)
    elif train_samples is None:
        train_samples = sum(per_epoch)
        if not train_samples:  # (windows only: every source has samples)
            raise ProfilerError(f"no source holds a window of {seq_length:,} tokens: give "
                                "--train-samples, --train-iters or --train-tokens")
    _bounded(train_samples)
    given = None if spec.weights is None else normalize(spec.weights)
    if seq_length and given is None and len(hists) > 1 and 0 in per_epoch:
        empty = spec.prefixes[per_epoch.index(0)]
        raise ProfilerError(f"{empty}: fewer than {seq_length + 1:,} tokens, no window in an "
                            "epoch: without weights Megatron-LM builds it empty")
    weights, size, requested, built = _sizes(given, per_epoch, train_samples)
    drawn = (np.array([size], np.int64) if len(hists) == 1
             else blending_counts(weights, size))
    if any(h.above_count for h in hists):  # one cap, so that the parts add up
        cap = min(h.cap for h in hists)
        hists = [h.with_cap(cap) for h in hists]
    drawn_of = [(i, p, h, int(d), None if requested is None else requested[i],
                 None if built is None else built[i], float(weights[i]))
                for i, (p, h, d) in enumerate(zip(spec.prefixes, hists, drawn, strict=True))]
    if seq_length:
        sources, parts, warnings = _windows_drawn(spec, drawn_of, per_epoch, size,
                                                  seq_length, warn_epochs)
    else:
        sources, parts, warnings = _samples_drawn(spec, drawn_of, size, warn_epochs)
    return Blend(spec, train_samples, train_tokens, int(size), tuple(sources), merge(parts),
                 tuple(warnings), warn_epochs, seq_length=seq_length)


#: One source of a drawn blend: (index, path, histogram, drawn, requested, built, weight).
_Drawn = tuple[int, str, LengthHistogram, int, int | None, int | None, float]


def _samples_drawn(spec: BlendSpec, drawn_of: list[_Drawn], size: int, warn_epochs: float
                   ) -> tuple[list[BlendSource], list[LengthHistogram], list[str]]:
    """Each source of a blend of the histograms' samples, the histogram of its samples
    drawn, and the warnings."""
    parts = [repeated(h, d) for _, _, h, d, _, _, _ in drawn_of]
    tokens = [p.tokens for p in parts]
    all_tokens = sum(tokens)
    sources = []
    warnings = []
    for i, p, h, d, requested, built, nw in drawn_of:
        share = tokens[i] / all_tokens if all_tokens else 0.0
        ratio = share / nw if nw > 0 else None
        src = BlendSource(
            i, p, None if spec.weights is None else spec.weights[i], nw, h.valid, h.tokens,
            h.mean, requested, built, d, d / h.valid, d / size if size else 0.0,
            tokens[i], share, ratio)
        sources.append(src)
        if ratio is not None and d and (ratio >= SHARE_FACTOR or ratio <= 1 / SHARE_FACTOR):
            warnings.append(
                f"source {i} ({p}) gets {100 * share:.1f}% of the tokens for a weight of "
                f"{100 * nw:.1f}% ({ratio:.2f}x): weights share samples, and its samples "
                f"average {h.mean or 0:,.0f} tokens")
        if h.null_count or h.invalid_count:
            warnings.append(f"source {i} ({p}) has {h.null_count:,} null and "
                            f"{h.invalid_count:,} negative lengths: they are no samples of "
                            "the blend")
        if src.epochs > warn_epochs:
            warnings.append(f"source {i} ({p}) is repeated {src.epochs:.2f} epochs, more "
                            f"than {warn_epochs:g}")
        if built is not None and d > built:
            warnings.append(f"source {i} ({p}) is drawn {d:,} times, more than the {built:,} "
                            "Megatron-LM builds: it raises IndexError (raise "
                            "mid_level_dataset_surplus)")
    return sources, parts, warnings


#: The most samples a blend is asked for: Megatron-LM's blending indices take 10 bytes a
#: sample (160 GiB here), and drawing them takes time in proportion.
MAX_TRAIN_SAMPLES = 1 << 34


def _bounded(train_samples: int) -> None:
    """A training size this analysis (and Megatron-LM) can draw, else a `ProfilerError`."""
    if train_samples <= 0:
        raise ProfilerError(f"--train-samples must be positive, got {train_samples}")
    if train_samples > MAX_TRAIN_SAMPLES:
        raise ProfilerError(f"{train_samples:,} training samples: more than the "
                            f"{MAX_TRAIN_SAMPLES:,} a blend is checked for (Megatron-LM's "
                            "blending indices alone would take 10 bytes each)")


def _sizes(given: np.ndarray | None, lengths: list[int], train_samples: int
           ) -> tuple[np.ndarray, int, list[int] | None, list[int] | None]:
    """Megatron's blend of datasets of ``lengths`` samples an epoch: its weights, its size,
    and each dataset's requested and built samples (None without weights)."""
    if len(lengths) > 32766:
        raise ProfilerError(f"{len(lengths)} datasets: Megatron-LM's BlendedDataset takes "
                            "fewer than 32767")
    if given is None:
        if len(lengths) == 1:  # one prefix is no blend: it gives every sample asked for
            return np.ones(1), train_samples, None, None
        return normalize(lengths), min(train_samples, sum(lengths)), None, None
    requested = target_sizes(given, train_samples)
    built = target_sizes(given, train_samples, SURPLUS)
    return normalize(given), (train_samples if len(lengths) == 1 else sum(requested)), \
        requested, built


def _windows_drawn(spec: BlendSpec, drawn_of: list[_Drawn], per_epoch: list[int], size: int,
                   seq_length: int, warn_epochs: float
                   ) -> tuple[list[BlendSource], list[LengthHistogram], list[str]]:
    """Each source of a blend of GPTDataset windows of ``seq_length`` tokens (the module
    docstring), the documents its windows hold (its histogram repeated for the fraction
    of its tokens drawn: whole epochs exact, the last partial one expected), and the
    warnings."""
    parts = [repeated(h, (d * seq_length * h.valid) // h.tokens)
             for _, _, h, d, _, _, _ in drawn_of]
    sources, warnings = [], []
    for i, p, h, d, requested, built, nw in drawn_of:
        src = BlendSource(
            i, p, None if spec.weights is None else spec.weights[i], nw,
            h.valid, h.tokens, h.mean, requested, built, d, d * seq_length / h.tokens,
            d / size if size else 0.0, d * seq_length, d / size if size else 0.0,
            (d / size) / nw if size and nw > 0 else None, per_epoch[i])
        sources.append(src)
        if h.null_count or h.invalid_count:
            warnings.append(f"source {i} ({p}) has {h.null_count:,} null and "
                            f"{h.invalid_count:,} negative lengths: no tokens of the blend")
        if src.epochs > warn_epochs:
            warnings.append(f"source {i} ({p}) is repeated {src.epochs:.2f} epochs (its "
                            f"tokens drawn over its tokens), more than {warn_epochs:g}")
    return sources, parts, warnings
