"""Typed options: backend options are validated, one name means one thing, and none is
silently dropped (an option the chosen backend cannot use is a usage error that says why);
the bucket defaults have one source, BucketParams."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_profiler import ProfilerError, available_backends, get_backend, histogram
from gpu_profiler.backends import CpuOptions, CudaOptions
from gpu_profiler.cli import main

NO_CUDA = available_backends()["cuda"]


def test_options_are_validated():
    for kw, says in (({"threads": 0}, "threads must be an integer from 1 to 1024"),
                     ({"threads": True}, "threads must be"), ({"threads": 5000}, "threads")):
        with pytest.raises(ProfilerError, match=says):
            CpuOptions(**kw)
    for kw, says in (({"devices": ()}, "devices must be GPU ids"),
                     ({"devices": (0, -1)}, "devices must be GPU ids"),
                     ({"streams": 1}, "streams must be at least 2"),
                     ({"chunk_bytes": 8}, "chunk_bytes must be at least 64"),
                     ({"threads_per_block": 2048}, "threads_per_block must be")):
        with pytest.raises(ProfilerError, match=says):
            CudaOptions(**kw)
    assert CudaOptions(devices=[1, 2]).devices == (1, 2)


def test_each_backend_takes_only_its_own_options():
    assert get_backend("numba", CpuOptions(threads=2))._threads == 2
    assert get_backend("numba", {"threads": 3})._threads == 3  # a dict of its fields
    assert get_backend("numba", threads=1)._threads == 1
    assert get_backend("auto", CpuOptions(threads=2)).name == "numba"
    with pytest.raises(ProfilerError, match="options of the numba backend, not of 'numpy'"):
        get_backend("numpy", CpuOptions())
    with pytest.raises(ProfilerError, match=r"options of the cuda backend, not of 'numba'"):
        get_backend("numba", CudaOptions(devices=(1,)))
    with pytest.raises(ProfilerError, match=r"unknown backend options \['device'\]"):
        get_backend("auto", {"device": 1})
    with pytest.raises(ProfilerError, match="not both"):
        get_backend("numba", CpuOptions(), threads=2)


@pytest.mark.skipif(NO_CUDA is None, reason="a GPU is here: cuda options apply")
def test_cuda_options_without_cuda_say_why():
    """auto with CudaOptions means cuda: without it, an error with the reason, not a CPU
    scan that ignores the devices asked for."""
    with pytest.raises(ProfilerError, match=r"backend 'cuda' is not available \(asked for "
                                            r"by CudaOptions\): " + NO_CUDA.split(" (")[0]):
        histogram(np.arange(10), backend_options={"devices": [1]})


@pytest.mark.skipif(NO_CUDA is None, reason="a GPU is here: --device applies")
@pytest.mark.parametrize("args", [["--device", "1"], ["--devices", "0,1"]])
def test_cli_device_without_cuda_is_a_usage_error(hf_dir, capsys, args):
    with pytest.raises(SystemExit) as exc:
        main(["profile", str(hf_dir[0]), "-q", *args])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "backend 'cuda' is not available" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_device_and_devices_together(hf_dir, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["profile", str(hf_dir[0]), "-q", "--device", "0", "--devices", "0,1"])
    assert exc.value.code == 2 and "not both" in capsys.readouterr().err


def test_bucket_defaults_have_one_source():
    """The API's, the sampler's and the CLI's bucket defaults are BucketParams' own."""
    import inspect
    from dataclasses import fields

    from gpu_profiler import BucketBatchSampler, BucketParams, profile
    from gpu_profiler.cli.options import ScanOptions

    want = {f.name: f.default for f in fields(BucketParams)}
    for fn in (profile, BucketBatchSampler):
        params = inspect.signature(fn).parameters
        for name, default in want.items():
            if name in params:
                assert tuple(params[name].default) == default if name == "bounds" else \
                    params[name].default == default, (fn, name)
    cli = ScanOptions()
    assert cli.params() == BucketParams()


def test_an_eot_of_zero_is_an_option_given():
    from gpu_profiler.readers.base import SourceOptions

    assert SourceOptions(eot=0).given() == ["eot"]
    assert SourceOptions(eot=None, trust_statistics=False).given() == []
