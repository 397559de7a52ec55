"""The New sweep form (docs/sweeps.md "The sweep page"): a team, a name, and the rest of the sweep file as YAML or JSON.

The form checks only what is its own: a team the user may submit work in (another is no choice, exactly as a team
that does not exist), a name, and a spec that reads as a mapping of JSON's values (:func:`slipway.specfile.read_fields`,
the reader of the command line's ``-f``: an unquoted date, ``.nan`` or ``!!binary`` is said with its line) holding no
team or name of its own. Every field of the sweep is checked once, by the services the API's create and dry run call
(:func:`sweeps.services.preview`, :func:`sweeps.services.create`); :meth:`NewSweepForm.add_service_errors` puts their
errors back on the form, each naming its field's path (``parameters.lr: min: required.``).
"""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from slipway.specfile import SpecError, read_fields
from sweeps import example
from sweeps.services import base_key
from teams.models import Team

#: The longest spec the form takes (a sweep file is a few hundred characters; the API's body limit is far above).
MAX_SPEC_CHARS = 100_000

#: The service's keys of errors that name no field.
UNNAMED = ("non_field_errors", "__all__")


class NewSweepForm(forms.Form):
    team = forms.ChoiceField(help_text="Its trials are the team's work: its quota, its budget, its queue.")
    name = forms.CharField(help_text="Lowercase letters, digits and '-'; its trials are <name>-t001, <name>-t002, …")
    spec = forms.CharField(
        label="Sweep file",
        max_length=MAX_SPEC_CHARS,
        widget=forms.Textarea(attrs={"rows": 20, "spellcheck": "false", "wrap": "off"}),
    )

    def __init__(self, data=None, *, teams: list[Team], initial: dict | None = None) -> None:
        super().__init__(data, initial=initial)
        self.teams = {team.slug: team for team in teams}
        self.fields["team"].choices = [(team.slug, team.name) for team in teams]
        self.fields["spec"].help_text = (
            f"YAML or JSON: the fields of POST /api/v1/sweeps/ but team and name — {base_key()} (the trials' base), "
            "parameters, objective, sampler, pruner, parallel, max_trials, max_cost or max_gpu_hours, seed."
        )

    @classmethod
    def example(cls, teams: list[Team], team: Team) -> NewSweepForm:
        """The form as the page starts it: ``team`` chosen, the example sweep filled in (:mod:`sweeps.example`)."""
        return cls(teams=teams, initial={"team": team.slug, "name": example.NAME, "spec": example.SPEC})

    def clean_spec(self) -> dict:
        try:
            fields = read_fields(self.cleaned_data["spec"], f"{base_key()}: …, parameters: …")
        except SpecError as exc:
            raise ValidationError(str(exc)) from None
        own = sorted({"team", "name"} & fields.keys())
        if own:
            raise ValidationError(f"{' and '.join(own)}: set above, not in the sweep file.")
        return fields

    @property
    def chosen_team(self) -> Team:
        return self.teams[self.cleaned_data["team"]]

    def sweep_fields(self) -> dict:
        """The sweep as the services take it (the API's body without its team)."""
        return {**self.cleaned_data["spec"], "name": self.cleaned_data["name"]}

    def add_service_errors(self, error: ValidationError) -> None:
        """The services' field errors on the form: the name's under the name, every other under the sweep file,
        after the path of its field (``parameters.lr: min: required.``, ``run.image: …``)."""
        for path, messages in error.message_dict.items():
            for message in messages:
                if path == "name":
                    self.add_error("name", message)
                else:
                    self.add_error("spec", message if path in UNNAMED else f"{path}: {message}")
