"""Fixtures of the sandbox tests: a fresh backend, and the default inventory."""

from __future__ import annotations

import pytest

from sandbox.backend import SandboxBackend


@pytest.fixture
def backend(db) -> SandboxBackend:
    return SandboxBackend()
