"""The New sweep page (docs/sweeps.md "The sweep page"): the example it starts with creates a sweep as it is, Preview
answers the API's dry run and creates nothing, every bad input is said on the form naming its field and creates
nothing, and only the teams a user may submit work in are offered (viewers 403, another team's slug as none)."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
import yaml
from django.urls import reverse

from core.formatting import format_money
from jobs.models import TrainingRun
from quotas.demo import seed_team_quotas
from sweeps import driver, example
from sweeps.forms import MAX_SPEC_CHARS
from sweeps.models import Study, StudyTrial, Sweep, Trial
from teams.models import Role
from teams.permissions import VIEWERS_CANNOT_SUBMIT
from tests.docs import scan
from tests.factories import add_member, make_user

pytestmark = pytest.mark.django_db

NEW, PREVIEW = reverse("sweeps:new"), reverse("sweeps:preview")
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def ready(team, quota, published, fake_backend):
    """The team holds the example's MIG slices (the demo's ML Research does too)."""
    seed_team_quotas(team, {"a100-3g.40gb": 4})
    return team


def posted(**changes) -> dict:
    return {"team": "ml-research", "name": example.NAME, "spec": example.SPEC, **changes}


def created_nothing() -> bool:
    return not (
        Sweep.objects.exists()
        or Study.objects.exists()
        or StudyTrial.objects.exists()
        or Trial.objects.exists()
        or TrainingRun.objects.exists()
    )


def errors_of(html: str, field: str) -> list[str]:
    found = re.search(rf'<ul class="errorlist" id="id_{field}_errors">(.*?)</ul>', html, re.S)
    return re.findall(r"<li>(.*?)</li>", found.group(1), re.S) if found else []


def test_the_docs_show_the_example_the_page_starts_with():
    """One example: docs/sweeps.md's sweep file (which the docs walk creates from the command line on the demo) is the
    page's, with a team and the name."""
    shown = [
        shown
        for block in scan.blocks(scan.REPO / "docs" / "sweeps.md")
        if block.language == "console"
        for _line, command, shown in scan.commands_in_block(block)
        if command == "cat sweep.yaml"
    ]
    assert shown == [example.sweep_file("ml-research")]


def test_the_page_starts_with_the_example_for_the_current_team(client, member, ready, other_team):
    client.force_login(member)
    response = client.get(NEW)
    assert response.status_code == 200
    form = response.context["form"]
    assert (form["team"].value(), form["name"].value(), form["spec"].value()) == (
        "ml-research",
        "lr-batch",
        example.SPEC,
    )
    html = response.content.decode()
    assert '<option value="ml-research" selected>ML Research</option>' in html
    assert 'value="vision"' not in html  # not a team of theirs
    assert f'hx-post="{PREVIEW}"' in html and 'id="create-sweep"' in html and 'id="submit-refused"' not in html


def test_the_example_unchanged_creates_the_sweep_and_its_trials_launch(client, member, ready):
    client.force_login(member)
    response = client.post(NEW, posted())
    sweep = Sweep.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("sweeps:detail", args=[sweep.pk])
    assert (sweep.name, sweep.team.slug, sweep.created_by, sweep.max_trials, sweep.parallel) == (
        "lr-batch",
        "ml-research",
        member,
        27,
        3,
    )
    assert sweep.max_cost == Decimal("5.00") and sweep.pruner["type"] == "asha"
    assert sweep.study.directions  # its study, created with it
    driver.advance(sweep.pk)  # as the task published after commit does
    trials = list(Trial.objects.filter(sweep=sweep).select_related("study_trial"))
    assert len(trials) == 3 and all(t.study_trial.study_id == sweep.study_id and t.workload_id for t in trials)
    page = client.get(response["Location"]).content.decode()
    assert "Sweep lr-batch was created" in page and "lr-batch-t001" in page


def test_preview_shows_the_shape_and_the_cost_range_and_creates_nothing(client, member, ready):
    client.force_login(member)
    response = client.post(PREVIEW, posted(), **HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html and 'id="sweep-shape"' in html  # the fragment alone
    shape = response.context["shape"]
    assert shape.trials == 27 and shape.parallel == 3 and [r.steps for r in shape.rungs] == [120, 360, 1080, 2400]
    assert '<td class="num">1080</td><td class="num">3</td>' in html
    cost = html[html.index('id="shape-cost"') :]
    assert f"{format_money(shape.cost_low)} to {format_money(shape.cost_high)}" in cost
    assert "as ASHA's rungs stop trials" in cost
    assert f"{shape.trials_within_cap} of 27 whole trials within it" in html
    assert "Starts now" in html  # the first trial's preview: admitted at once
    assert created_nothing()


def test_preview_shows_the_same_figures_as_the_api_dry_run(client, api, member, ready):
    """One function: the fragment's cost range and a whole trial are the dry run's, to the cent."""
    client.force_login(member)
    shape = client.post(PREVIEW, posted(), **HTMX).context["shape"]
    body = {"team": "ml-research", "name": example.NAME, **yaml.safe_load(example.SPEC)}
    answer = api.post("/api/v1/sweeps/?dry_run=1", body, format="json").json()
    assert answer["cost"]["low"] == str(shape.cost_low.quantize(Decimal("0.01")))
    assert answer["cost"]["high"] == str(shape.cost_high.quantize(Decimal("0.01")))
    assert answer["trial"]["cost"] == str(shape.trial_cost.quantize(Decimal("0.01")))
    assert answer["trials_within_cap"] == shape.trials_within_cap
    assert created_nothing()


def spec_with(line: str, instead: str = "") -> str:
    """The example with ``instead``'s line replaced by ``line`` (or ``line`` added at the end)."""
    if not instead:
        return example.SPEC + line + "\n"
    assert instead in example.SPEC
    return example.SPEC.replace(instead, line)


LAST = len(example.SPEC.splitlines()) + 1  # the line a case adds at the end

BAD = {
    "a parameter without its min": (
        {
            "spec": spec_with(
                "  lr: {type: float, max: 0.1, log: true}", "  lr: {type: float, min: 0.00001, max: 0.1, log: true}"
            )
        },
        "spec",
        "parameters.lr: min: required.",
    ),
    "the base's own field": (
        {"spec": spec_with("  image: not an image!", "  image: ghcr.io/acme/bert-trainer:2.1")},
        "spec",
        "run.image: ",
    ),
    "a pruner's field": (
        {
            "spec": spec_with(
                "pruner: {type: asha, min_resource: 3000, max_resource: 2400}",
                "pruner: {type: asha, min_resource: 120, reduction_factor: 3, max_resource: 2400}",
            )
        },
        "spec",
        "pruner.min_resource: Must be below max_resource.",
    ),
    "an unknown field": ({"spec": spec_with("budget: 5")}, "spec", "Unknown field(s): budget."),
    "an unquoted date": (
        {"spec": spec_with("seed: 2024-01-01")},
        "spec",
        f"line {LAST}, column 7: 2024-01-01 is a date or a time, which JSON has no value for",
    ),
    ".nan": (
        {"spec": spec_with("max_cost: .nan", "max_cost: 5")},
        "spec",
        f"line {LAST - 1}, column 11: .nan is not a number JSON has",
    ),
    "!!binary": (
        {"spec": spec_with("  image: !!binary aGVsbG8=", "  image: ghcr.io/acme/bert-trainer:2.1")},
        "spec",
        "line 2, column 10: !!binary is bytes, which JSON has no value for",
    ),
    "a number as a key": ({"spec": spec_with("7: seven")}, "spec", f"line {LAST}, column 1: the key 7 is not text"),
    "broken YAML": ({"spec": spec_with("parallel: [3", "parallel: 3")}, "spec", "while parsing a flow sequence"),
    "no mapping": ({"spec": "- lr\n- batch\n"}, "spec", "expected the API&#x27;s fields as a mapping"),
    "a NUL by escape": ({"spec": spec_with('seed: "\\0"')}, "spec", "a string holds a NUL character"),
    "aliases past the bound": (
        {
            "spec": "a: &a ["
            + ", ".join(["1"] * 10)
            + "]\n"
            + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for n, p in zip("bcdefg", "abcdef", strict=True))
        },
        "spec",
        "more than 100,000 values",
    ),
    "nesting too deep": ({"spec": "a: " + "[" * 3000}, "spec", "it is nested too deeply"),
    "a name in the file": ({"spec": spec_with("name: other")}, "spec", "name: set above, not in the sweep file."),
    "too long": ({"spec": example.SPEC + "#" * MAX_SPEC_CHARS}, "spec", "Ensure this value has at most"),
    "a bad name": ({"name": "LR Batch"}, "name", "Use lowercase letters, digits and &#x27;-&#x27;"),
    "no name": ({"name": ""}, "name", "This field is required."),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_said_naming_its_field_and_creates_nothing(client, member, ready, case):
    changes, field, said = BAD[case]
    client.force_login(member)
    response = client.post(NEW, posted(**changes))
    assert response.status_code == 400
    assert any(said in error for error in errors_of(response.content.decode(), field)), errors_of(
        response.content.decode(), field
    )
    previewed = client.post(PREVIEW, posted(**changes), **HTMX)
    assert previewed.status_code == 200 and 'id="sweep-preview-errors"' in previewed.content.decode()
    assert said in previewed.content.decode()
    assert created_nothing()


def test_a_name_a_live_sweep_has_is_said_and_leaves_nothing_half_written(client, member, ready):
    """The name's uniqueness is the database's (a live sweep's name): the refused one leaves no second study."""
    client.force_login(member)
    assert client.post(NEW, posted()).status_code == 302
    response = client.post(NEW, posted())
    assert response.status_code == 400
    assert errors_of(response.content.decode(), "name") == [
        "The team already has a live sweep named &#x27;lr-batch&#x27;."
    ]
    assert Sweep.objects.count() == 1 and Study.objects.count() == 1


def test_a_viewer_sees_the_form_disabled_and_may_neither_preview_nor_create(client, viewer, ready):
    client.force_login(viewer)
    response = client.get(NEW)
    assert response.status_code == 403
    html = response.content.decode()
    assert 'id="submit-refused"' in html and VIEWERS_CANNOT_SUBMIT.replace("'", "&#x27;") in html
    assert '<fieldset class="plain" disabled>' in html
    assert client.post(NEW, posted()).status_code == 403
    assert client.post(PREVIEW, posted(), **HTMX).status_code == 403
    assert created_nothing()


def test_only_teams_the_user_may_submit_in_are_offered_and_another_is_refused(client, viewer, ready, other_team):
    """A viewer here who is a member elsewhere is offered the other team alone; posting this one is refused as a
    team that does not exist would be, and so is an outsider's post."""
    add_member(other_team, viewer, Role.MEMBER)
    client.force_login(viewer)
    form = client.get(NEW).context["form"]
    assert form.fields["team"].choices == [("vision", "Vision")] and form["team"].value() == "vision"
    for slug in ("ml-research", "no-such-team"):
        response = client.post(NEW, posted(team=slug))
        assert response.status_code == 400
        assert errors_of(response.content.decode(), "team") == [
            f"Select a valid choice. {slug} is not one of the available choices."
        ]
        assert (
            f"{slug} is not one of the available choices"
            in client.post(PREVIEW, posted(team=slug), **HTMX).content.decode()
        )
    assert created_nothing()


def test_the_list_links_new_sweep_for_members_and_tells_viewers_why_not(client, member, viewer, ready):
    client.force_login(member)
    html = client.get("/sweeps/").content.decode()
    assert f'<a class="button primary" href="{NEW}">New sweep</a>' in html
    assert f'<a href="{NEW}">Start the first one</a>' in html
    client.force_login(viewer)
    html = client.get("/sweeps/").content.decode()
    assert f'href="{NEW}"' not in html
    assert 'disabled title="Viewers can&#x27;t submit' in html and 'id="submit-refused"' in html


def test_someone_in_no_team_is_told_whom_to_ask(client, db):
    client.force_login(make_user("nobody"))
    assert "workloads/no_team.html" in [t.name for t in client.get(NEW).templates]
    assert client.post(PREVIEW, posted()).status_code == 403
