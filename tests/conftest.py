"""Shared fixtures and the Hypothesis profile."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from streamdedup.core import kernels
from streamdedup.core.engine import Engine
from streamdedup.core.params import EngineParams
from tests.helpers import SESSION_KERNELS

# STREAMDEDUP_KERNELS=python runs the suite on the Python kernels (CI runs the engine's tests both ways); the
# commands the tests start read the same variable.
kernels.use(SESSION_KERNELS)

# "ci" (the default) draws the same examples on every run, so the suite passes or fails the same way on every
# machine; "hunt" draws new ones each run and many more, for looking for counterexamples on purpose.
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "print_blob": True}
settings.register_profile("ci", max_examples=100, derandomize=True, **_COMMON)
# STREAMDEDUP_HYPOTHESIS_EXAMPLES sets how many examples "hunt" draws per property (default 2,000).
settings.register_profile(
    "hunt", max_examples=int(os.environ.get("STREAMDEDUP_HYPOTHESIS_EXAMPLES", "2000")), **_COMMON
)
settings.load_profile(os.environ.get("STREAMDEDUP_HYPOTHESIS_PROFILE", "ci"))

# Haystack reads this when it is first imported (by the adapter's tests or its doctest) and, unless it is off,
# writes a telemetry id into the home directory and reports pipeline runs.
os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"


@pytest.fixture(scope="session")
def engine() -> Engine:
    return Engine(EngineParams())


@pytest.fixture
def compiled_kernels():
    """The compiled kernels for one test about them, whichever the session runs; the session's choice after."""
    kernels.use("compiled")
    yield
    kernels.use(SESSION_KERNELS)
