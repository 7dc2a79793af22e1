"""The CPU kernels' one decorator: numba's ``njit``, cached on disk, without numba's reference
counting (``_nrt=False``).

A kernel allocates nothing (the native library links no allocator either). With the
runtime on, every array handed to a helper that is not inlined costs reference-count
updates and calls on each side of the call: the JSON Lines parser, which hands its text to a
helper per token, ran 3.2x slower through the JIT (bench/results/jit_runtime.md). Two modules
keep the runtime (plain ``njit``): `ipc`, whose exceptions carry the offset of what is
corrupt (an exception's run-time arguments need it), and `streams`, whose helpers return
views of their arguments.
"""

from __future__ import annotations

from functools import partial

from numba import njit

#: ``@kernel`` or ``@kernel(nogil=True, ...)``.
kernel = partial(njit, cache=True, _nrt=False)
