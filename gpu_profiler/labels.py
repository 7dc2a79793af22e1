"""Each sample's group label (its source, language, dataset) given in memory, as int16 codes
into the groups' names: what `gpu_profiler.BucketBatchSampler`'s ``groups`` interleaves.

One int16 array of the samples' length is all it keeps (at most `MAX_GROUPS` groups):
integer labels are renumbered by a table in two chunked passes (no sort, no hash), strings
are dictionary-encoded by pyarrow and a dictionary column's codes are taken as they are.
A null is a group of its own, named `gpu_profiler.groups.NULL`, last.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_profiler.errors import ProfilerError
from gpu_profiler.histogram import MAX_GROUPS

#: Integer labels spanning more values than this are renumbered by a sort, not a table.
TABLE_SPAN = 1 << 24
#: Labels shifted at once (bounds the temporary).
CHUNK = 1 << 22
#: A code: at most `MAX_GROUPS` groups, 2 bytes a sample.
CODE = np.int16


def label_codes(labels: Any, n: int) -> tuple[np.ndarray, list[str]]:
    """``n`` samples' labels (strings or integers: a sequence, numpy, pyarrow, torch or
    cupy) as ``(codes, names)``, ``names[codes[i]]`` the group of sample ``i``; a one-line
    `ProfilerError` for anything else, another count, or more than `MAX_GROUPS` groups."""
    import pyarrow as pa

    g = on_host(labels)
    try:
        if isinstance(g, pa.ChunkedArray):
            g = (g.unify_dictionaries() if pa.types.is_dictionary(g.type) else g
                 ).combine_chunks()
        if isinstance(g, np.ndarray) and g.dtype.kind in "iu" and g.ndim == 1:
            codes, names = _integers(g)
        else:
            if not isinstance(g, pa.Array):
                g = pa.array(g if isinstance(g, (list, tuple)) else np.asarray(g))
            codes, names = _arrow(g)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise ProfilerError(f"groups must be one label (a string or an integer) per sample: "
                            f"{exc}") from None
    if codes.size != n:
        raise ProfilerError(f"groups: {codes.size:,} labels for {n:,} samples (one per "
                            "sample, in the order of the lengths)")
    _at_most(len(names))
    return codes, names


def on_host(x: Any) -> Any:
    """A torch tensor (on any device) or a cupy array as numpy; anything else as it is."""
    module = type(x).__module__.split(".")[0]
    if module == "torch":
        return x.detach().cpu().numpy()
    return x.get() if module == "cupy" else x


def _integers(values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Integer labels renumbered ``0 ..`` in the order of their values: which values occur,
    then each label's number, `CHUNK` labels at a time."""
    if not values.size:
        return np.zeros(0, CODE), []
    lo, hi = int(values.min()), int(values.max())
    if hi - lo >= TABLE_SPAN:
        present, codes = np.unique(values, return_inverse=True)
        _at_most(present.size)
        return codes.astype(CODE), [str(v) for v in present.tolist()]
    wide = np.uint64 if values.dtype == np.uint64 else np.int64  # holds lo and the labels
    seen = np.zeros(hi - lo + 1, bool)
    for at in range(0, values.size, CHUNK):
        seen[np.subtract(values[at:at + CHUNK], wide(lo), dtype=wide)] = True
    present = np.flatnonzero(seen)
    _at_most(present.size)
    table = np.zeros(hi - lo + 1, CODE)
    table[present] = np.arange(present.size, dtype=CODE)
    codes = np.empty(values.size, CODE)
    for at in range(0, values.size, CHUNK):
        codes[at:at + CHUNK] = table[np.subtract(values[at:at + CHUNK], wide(lo), dtype=wide)]
    return codes, [str(lo + int(v)) for v in present]


def _at_most(groups: int) -> None:
    if groups > MAX_GROUPS:
        raise ProfilerError(f"groups: {groups:,} groups, more than {MAX_GROUPS:,}: label "
                            "each sample with its source, not an id")


def _arrow(arr: Any) -> tuple[np.ndarray, list[str]]:
    """A pyarrow string, integer or dictionary array's codes: its dictionary's indices."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from gpu_profiler.groups import NULL
    from gpu_profiler.readers.arrow import values

    t = arr.type
    if pa.types.is_null(t):  # every label null: one group
        return np.zeros(len(arr), CODE), [NULL] if len(arr) else []
    if pa.types.is_integer(t) and not arr.null_count:
        return _integers(values(arr))
    value = t.value_type if pa.types.is_dictionary(t) else t
    if not (pa.types.is_string(value) or pa.types.is_large_string(value)
            or pa.types.is_integer(value)):
        raise TypeError(f"got {t}")
    encoded = arr if pa.types.is_dictionary(t) else pc.dictionary_encode(arr)
    idx = encoded.indices
    _at_most(len(encoded.dictionary))
    names = [NULL if v is None else str(v) for v in encoded.dictionary.to_pylist()]
    codes = values(idx).astype(CODE)
    if idx.null_count:
        codes[~idx.is_valid().to_numpy(zero_copy_only=False)] = len(names)
        names.append(NULL)
    return _once(codes, names)


def _once(codes: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """``codes`` into ``names`` with each name once and `NULL` last: a dictionary may
    repeat a value, or hold a null beside null indices (one group, as `--group-by`
    counts them)."""
    from gpu_profiler.groups import NULL

    unique = sorted(dict.fromkeys(names), key=lambda n: n == NULL)  # (a stable sort)
    if unique == names:
        return codes, names
    index = {n: i for i, n in enumerate(unique)}
    return np.array([index[n] for n in names], CODE)[codes], unique
