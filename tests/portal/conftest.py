"""Fixtures of the portal tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def fast_password_hasher(settings):
    # PBKDF2's deliberate slowness costs ~0.4 s per user created; no test here measures it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
