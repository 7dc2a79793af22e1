"""The integration group (``pytest -m integration tests/integration``; ``make
test-integration`` installs its extra and runs it): BucketBatchSampler under real training
stacks, in real processes, on the CPU. A plain ``pytest`` leaves it out (pyproject's
addopts deselect the ``integration`` marker)."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.fixture
def stack():
    """Fails (never skips) when a stack the test launches is not installed: the group
    is run by ``make test-integration``, which installs them all."""

    def need(*modules: str) -> None:
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if missing:
            pytest.fail(f"{', '.join(missing)} not installed: `make test-integration` "
                        "installs the `integration` extra")

    return need


@pytest.fixture(scope="session", autouse=True)
def native_kernels_built():
    """Build (or load) the sampler's native kernels once, before any job's processes
    need them."""
    from harness import plans

    plans(1, 1)
