"""Look-alike usernames (security review 5 #3): one rule, :mod:`teams.usernames`, wherever a name is made."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from teams.usernames import lookalike_of, username_keys
from tests.factories import make_user

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("name", "reads_as"), [
    ("\u217eave", "dave"),  # ⅾ, SMALL ROMAN NUMERAL FIVE HUNDRED
    ("\uff41\uff44\uff4d\uff49\uff4e", "admin"),  # fullwidth ａｄｍｉｎ
    ("aIice", "alice"),  # a capital I for the l: all ASCII
    ("AIice", "alice"),
    ("\u0430lice", "alice"),  # Cyrillic а
    ("user1", "userl"),  # TR39: 1 reads as l
])
def test_names_that_read_alike_have_one_key(name, reads_as):
    assert username_keys(name) & username_keys(reads_as)


@pytest.mark.parametrize("name", ["\u217eave", "\uff41\uff44\uff4d\uff49\uff4e", "aIice", "ALICE", "\u0430lice"])
def test_a_name_that_reads_as_an_existing_one_is_named_with_it(name):
    make_user("alice")
    make_user("dave")
    make_user("admin")
    assert lookalike_of(name) in ("alice", "dave", "admin")


def test_plainly_different_names_pass():
    make_user("alice")
    assert lookalike_of("alicia") is None and lookalike_of("bob") is None
    assert lookalike_of("\u043e\u043b\u044f") is None  # "оля", all Cyrillic, reads as itself
    assert lookalike_of("Jos\u00e9") is None  # a letter of its own, no imitation
    assert lookalike_of("alice") is None  # the same name: the database's uniqueness answers that
    # A non-ASCII name that reads as plain ASCII is a disguise even before its target exists.
    assert lookalike_of("\uff42\uff4f\uff42") == "bob"


def test_renaming_a_user_is_judged_against_everyone_else():
    alice = make_user("alice")
    assert lookalike_of("alice", exclude_pk=alice.pk) is None
    assert lookalike_of("aIice", exclude_pk=alice.pk) is None  # renaming herself to a spelling of her own name
    assert lookalike_of("aIice", exclude_pk=make_user("bob").pk) == "alice"


def add_user(client, username: str):
    return client.post("/admin/auth/user/add/", {"username": username, "usable_password": "true",
                                                  "password1": "pw-Slipway-123-x", "password2": "pw-Slipway-123-x"})


@pytest.mark.parametrize("name", ["\u217eave", "\uff44\uff41\uff56\uff45", "daVe", "aIice", "\u0430lice"])
def test_the_admin_console_refuses_to_create_a_look_alike(staff_client, name):
    """Review 5 #3: ⅾave (U+217E), fullwidth letters and aIice were kept as usernames."""
    make_user("alice")
    make_user("dave")
    response = add_user(staff_client, name)
    assert response.status_code == 200  # the form again, with the error
    page = response.content.decode()
    assert "reads like" in page or "already exists" in page, page[:2000]
    assert set(get_user_model().objects.values_list("username", flat=True)) == {"alice", "dave", "sam"}


def test_the_admin_console_creates_a_plainly_different_user(staff_client):
    make_user("alice")
    assert add_user(staff_client, "alicia").status_code == 302
    assert get_user_model().objects.filter(username="alicia").exists()


def test_the_admin_console_refuses_a_rename_to_a_look_alike_but_saves_other_edits(staff_client, staff):
    make_user("alice")
    bob = make_user("bob")
    url = f"/admin/auth/user/{bob.pk}/change/"
    form = {"username": "aIice", "email": "bob@example.com", "is_active": "on", "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00"}
    response = staff_client.post(url, form)
    assert response.status_code == 200 and "reads like" in response.content.decode()
    bob.refresh_from_db()
    assert bob.username == "bob"
    # Two look-alikes made before the rule existed: editing one's other fields is not refused.
    old = make_user("user1")
    make_user("userl")
    form = {**form, "username": "user1", "email": "new@example.com"}
    assert staff_client.post(f"/admin/auth/user/{old.pk}/change/", form).status_code == 302
    old.refresh_from_db()
    assert old.email == "new@example.com"
