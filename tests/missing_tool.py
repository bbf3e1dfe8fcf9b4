"""The suite's rule for a tool a test needs and the machine lacks: said plainly, a skip
for a developer, a failure under ``CI=true`` (CI must run every test)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(problem: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(problem)
    pytest.skip(problem)
