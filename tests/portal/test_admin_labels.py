"""The admin console names every model in good English: "Deliveries", "GPU flavors", "API tokens".

Django derives a label from the class name (``GpuFlavor`` → "gpu flavor") and a plural by adding
"s" ("deliverys"); every model sets its own where that reads wrong.
"""

from __future__ import annotations

import re

import pytest
from django.apps import apps
from django.utils.text import capfirst

#: Abbreviations that are written in capitals wherever they appear in a label.
ACRONYMS = ("gpu", "api", "cpu", "mig", "csv", "url", "oidc", "sso", "ip")


@pytest.mark.parametrize("model", apps.get_models(), ids=lambda m: m._meta.label)
def test_it_labels_every_model_in_good_english(model):
    one, many = str(model._meta.verbose_name), str(model._meta.verbose_name_plural)
    for label in (one, many):
        words = set(re.findall(r"[A-Za-z]+", label))
        assert not words & set(ACRONYMS), f"{model._meta.label}: {label!r} writes an abbreviation in lower case"
    # "delivery" → "deliveries", not Django's default "deliverys".
    assert not re.search(r"[^aeiou]ys$", many), f"{model._meta.label}: {many!r}"


def test_the_admin_index_shows_the_labels(client, staff):
    client.force_login(staff)
    page = client.get("/admin/").content.decode()
    for label in ("Deliveries", "GPU flavors", "API tokens"):
        assert f">{label}<" in page, label
    for wrong in ("Deliverys", "Gpu flavors", "Api tokens"):
        assert wrong not in page
    assert capfirst("team sharing") in page
