#!/usr/bin/env bash
# On a GPU machine (e.g. the H200 device image: numba, numba-cuda, cupy, pyarrow, typer, rich;
# no network): install this checkout without dependencies, run the GPU tests when pytest is
# there, then the benchmark, each under a timeout. Results land in bench/results/gpu.{json,md}.
# Usage: bench/gpu/run_device.sh [--smoke]      (PYTHON=... to pick the interpreter)
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
status=0

if ! $PY -m pip install -q --no-deps --no-build-isolation -e . 2>/dev/null \
        && ! $PY -m pip install -q --no-deps -e . ; then
    # No build backend offline: lay the package out by hand (kernels/ -> gpu_profiler/kernels).
    site=$(mktemp -d)
    cp -r gpu_profiler "$site/" && cp -r kernels "$site/gpu_profiler/kernels"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    echo "run_device: pip install failed; using PYTHONPATH=$site" >&2
fi

if $PY -c "import pytest" 2>/dev/null; then
    timeout 300 $PY -m pytest -q -p no:cacheprovider -m "gpu or cudasim" \
        tests/test_cuda_backend.py tests/test_cuda_sim.py || status=$?
    # every backend case on the real GPU, in-process (the same bodies as numpy and numba)
    if $PY -c "import hypothesis" 2>/dev/null; then
        timeout 300 $PY -m pytest -q -p no:cacheprovider -k cuda tests/test_backends.py \
            || status=$?
        # the token-stream document kernels, the same bodies too (and on files)
        timeout 300 $PY -m pytest -q -p no:cacheprovider -k "cuda and not simulator" \
            tests/test_documents.py tests/test_tokens.py tests/test_megatron.py || status=$?
    else
        echo "run_device: hypothesis not installed; skipping tests/test_backends.py" >&2
    fi
    timeout 300 $PY -m pytest -q -p no:cacheprovider tests/test_cuda_ptx.py || status=$?
else
    echo "run_device: pytest not installed; skipping the test files (the benchmark checks" \
         "every histogram against cupy.bincount / numpy)" >&2
fi

timeout 300 $PY bench/gpu/bench_gpu.py "$@" || status=$?
exit $status
