"""Shared fixtures and the Hypothesis profile."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from streamdedup.core.engine import Engine
from streamdedup.core.params import EngineParams

settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("ci")


@pytest.fixture(scope="session")
def engine() -> Engine:
    return Engine(EngineParams())
