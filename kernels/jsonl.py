"""CPU kernel (numba ``njit``) screening a block of JSON Lines text before pyarrow parses
it (`gpu_profiler.readers.jsonl`), natively compiled (`gpu_profiler.native`).

One pass over the bytes, allocating nothing: it counts the block's newlines and its
non-blank lines, and finds the first line that does not open a JSON object. Runs of
whitespace and the rest of a line are crossed 64 bytes at a time with branch-free tests,
which vectorize, so a block of millions of blank lines is screened as fast as any other
(~0.1-0.3 ns a byte), in no memory beyond the block itself.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_NL, _SP, _TAB, _CR, _OPEN = 10, 32, 9, 13, 123
_GROUP = 64  # bytes tested at once


@njit(cache=True)
def _blank(c):
    return c == _NL or c == _SP or c == _TAB or c == _CR


@njit(cache=True)
def _blank_run(a, i, n):
    """``(end, newlines)``: how far whole groups of whitespace from ``i`` reach, and the
    newlines among them (unsigned indices: no wraparound test, so the loop vectorizes)."""
    newlines = 0
    while i + _GROUP <= n:
        base = np.uint64(i)
        other = np.uint8(0)
        lines = np.uint8(0)
        for j in range(np.uint64(_GROUP)):
            c = a[base + j]
            other |= np.uint8((c != _NL) & (c != _SP) & (c != _TAB) & (c != _CR))
            lines += np.uint8(c == _NL)
        if other:
            break
        newlines += np.int64(lines)
        i += _GROUP
    return i, newlines


@njit(cache=True)
def _line_end(a, i, n):
    """Where the line holding ``a[i]`` ends: its newline, or ``n`` (a short line byte by
    byte, a longer one a group at a time)."""
    stop = min(i + _GROUP, n)
    while i < stop:
        if a[i] == _NL:
            return i
        i += 1
    while i + _GROUP <= n:
        base = np.uint64(i)
        hit = np.uint8(0)
        for j in range(np.uint64(_GROUP)):
            hit |= np.uint8(a[base + j] == _NL)
        if hit:
            break
        i += _GROUP
    while i < n and a[i] != _NL:
        i += 1
    return i


@njit(cache=True, nogil=True)
def screen(a, bom, out):
    """Screen the lines of the text ``a`` (uint8; a line ends at a newline, the last one
    may lack it), skipping a UTF-8 byte order mark at ``a[0]`` when ``bom``.

    Returns ``(newlines, solid, stray)``: the newlines counted, the non-blank lines seen,
    and the index (in the block, from 0) of the first non-blank line whose first byte after
    whitespace is not ``{``, or -1. The scan stops after that line: the counts then run up
    to it (it among the non-blank ones). The first ``out.shape[0]`` non-blank lines are
    recorded in ``out`` (int64, 3 columns): where the line starts, its index in the block,
    and where it ends (its newline, or the end of the block)."""
    n = a.size
    room = out.shape[0]
    newlines = 0
    solid = 0
    stray = -1
    i = 0
    if bom and n >= 3 and a[0] == 0xEF and a[1] == 0xBB and a[2] == 0xBF:
        i = 3
    start = 0
    while i < n:
        c = a[i]
        if i + 1 < n and _blank(c) and _blank(a[i + 1]):  # a run: crossed in groups
            end, lines = _blank_run(a, i, n)
            if lines:
                newlines += lines
                k = end - 1  # the line starts after the run's last newline
                while a[k] != _NL:
                    k -= 1
                start = k + 1
            if end > i:
                i = end
                continue
        if c == _NL:
            newlines += 1
            i += 1
            start = i
            continue
        if c == _SP or c == _TAB or c == _CR:
            i += 1
            continue
        # the line's first byte after whitespace: the rest of the line is pyarrow's
        j = _line_end(a, i + 1, n)
        if solid < room:
            out[solid, 0] = start
            out[solid, 1] = newlines
            out[solid, 2] = j
        solid += 1
        if c != _OPEN:
            stray = newlines
            break
        i = j
    return newlines, solid, stray
