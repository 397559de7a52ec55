"""The New run form's command line: split as a shell splits words (shlex), echoed as argv, never run by a shell."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from billing.models import QuotaHold
from jobs.models import TrainingRun
from tests.jobs.test_views import HTMX, form_data
from workloads.forms import argv_echo, argv_line, split_argv

# -- splitting --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "argv"), [
    ("python train.py", ["python", "train.py"]),
    ("python train.py --note 'hello world'", ["python", "train.py", "--note", "hello world"]),
    ('python -c "print(\'hi\')"', ["python", "-c", "print('hi')"]),
    (r"echo a\ b", ["echo", "a b"]),
    ("  spaced   out  ", ["spaced", "out"]),
    ("python\ntrain.py", ["python", "train.py"]),  # a pasted multi-line command splits the same way
    ("echo $HOME '*.txt' ~ a&&b", ["echo", "$HOME", "*.txt", "~", "a&&b"]),  # nothing expanded
    ("git clone https://x.example/r.git#main", ["git", "clone", "https://x.example/r.git#main"]),  # no comments
    ("echo ''", ["echo", ""]),
])
def test_it_splits_a_command_line_as_a_shell_splits_words(line, argv):
    assert split_argv(line) == argv


@pytest.mark.parametrize(("line", "message"), [
    ("python -c 'print(1)", "A quote is not closed"),
    ('echo "unbalanced', "A quote is not closed"),
    ("echo trailing\\", "lone backslash"),
])
def test_it_refuses_a_line_that_cannot_be_split(line, message):
    with pytest.raises(ValidationError) as caught:
        split_argv(line)
    assert message in caught.value.messages[0]


@pytest.mark.parametrize("argv", [
    ["python", "train.py", "--note", "hello world"], ["sh", "-c", "echo 'a' \"b\" $X"], ["", "x y", "it's"],
])
def test_it_turns_argv_back_into_the_line_that_splits_into_it(argv):
    assert split_argv(argv_line(argv)) == argv


def test_it_echoes_command_and_arguments_as_one_quoted_argv():
    echo = argv_echo([("Command", "python train.py"), ("Arguments", "--note 'a b' && rm -rf /")])
    assert echo.tokens == ('"python"', '"train.py"', '"--note"', '"a b"', '"&&"', '"rm"', '"-rf"', '"/"')
    assert echo.operators == ("&&",) and echo.error == "" and not echo.empty


def test_it_echoes_which_field_cannot_be_split():
    echo = argv_echo([("Command", "python"), ("Arguments", "--x 'open")])
    assert echo.tokens == () and echo.error.startswith("Arguments: A quote is not closed")


# -- the form ----------------------------------------------------------------------------------------


def test_it_stores_the_split_command_and_never_a_shell_string(client, member, team, quota, published):
    client.force_login(member)
    response = client.post("/runs/new/", form_data(command="python -c \"print('a b')\"", args="--tag 'x y' '&&'"))
    run = TrainingRun.objects.get()
    assert response.status_code == 302
    assert run.command == ["python", "-c", "print('a b')"] and run.args == ["--tag", "x y", "&&"]
    [job] = client.get(f"/api/v1/runs/{run.pk}/manifest/").json()
    container = job["spec"]["template"]["spec"]["containers"][0]
    # The argv itself, no "sh -c" wrapped around it.
    assert container["command"] == ["python", "-c", "print('a b')"] and container["args"] == ["--tag", "x y", "&&"]


@pytest.mark.parametrize(("field", "line", "message"), [
    ("command", "python -c 'print(1)", "A quote is not closed"),
    ("args", "--note \"unfinished", "A quote is not closed"),
    ("command", "python train.py \\", "lone backslash"),
    ("command", "''", "The program (first item) must not be blank."),
])
def test_it_shows_a_line_that_cannot_be_split_next_to_its_field(client, member, team, quota, published, field,
                                                                line, message):
    client.force_login(member)
    response = client.post("/runs/new/", form_data(**{field: line}))
    assert response.status_code == 400
    errors = response.content.decode().split(f'id="id_{field}_errors"', 1)
    assert len(errors) == 2 and message in errors[1].split("</ul>", 1)[0]
    assert errors[1].split("</ul>", 1)[0].count("<li>") == 1  # not also "This field is required."
    assert not TrainingRun.objects.exists() and not QuotaHold.objects.exists() and published == []


def test_it_echoes_the_argv_live_in_the_preview(client, member, team, quota):
    client.force_login(member)
    response = client.post("/runs/preview/", {"flavor": "a100-80gb", "command": "python train.py",
                                              "args": "--note 'hello world' | tee log"}, **HTMX)
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    # The echo replaces the one under the command field (out of band), the cost panel stays where it is.
    assert '<div id="argv-echo" class="argv-echo" aria-live="polite" hx-swap-oob="true">' in html
    tokens = ['"python"', '"train.py"', '"--note"', '"hello world"', '"|"', '"tee"', '"log"']
    assert ", ".join(f'<span class="token">{t.replace(chr(34), "&quot;")}</span>' for t in tokens) in html
    assert "No shell runs this command: | reach the program as plain arguments." in html
    assert "Starts now" in html


def test_it_echoes_an_unbalanced_quote_in_the_preview(client, member, team, quota):
    client.force_login(member)
    html = client.post("/runs/preview/", {"command": "python -c 'print(1)"}).content.decode()
    assert 'role="alert">Command: A quote is not closed' in html and 'class="token"' not in html


def test_it_echoes_the_argv_on_the_page_after_a_bad_submit(client, member, team, quota, published):
    client.force_login(member)
    html = client.post("/runs/new/", form_data(command="python 'my script.py'", image="Bad Image")).content.decode()
    assert '<div id="argv-echo" class="argv-echo" aria-live="polite">' in html  # in place, not out of band
    assert '<span class="token">&quot;my script.py&quot;</span>' in html


def test_it_shows_the_argv_on_the_run_page(client, member, team, quota, published, fake_backend):
    client.force_login(member)
    client.post("/runs/new/", form_data(command="python -c 'import sys; print(sys.argv)'", args="'a b' c"))
    run = TrainingRun.objects.get()
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "[&quot;python&quot;, &quot;-c&quot;, &quot;import sys; print(sys.argv)&quot;]" in html
    assert "[&quot;a b&quot;, &quot;c&quot;]" in html
