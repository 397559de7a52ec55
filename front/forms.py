"""Forms of the portal package: API tokens (and ``slipway login``'s device page), the Team page's member
management, settings and alert rules, the SSO preview."""

import json

from django import forms
from django.core.exceptions import ValidationError

from core.forms import ServiceErrorsForm
from teams.models import Role
from teams.sso import MissingGroupsClaimError, claim_groups
from workloads.telemetry.alert_settings import FIELDS


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. 'CI pipeline'.")
    expires_days = forms.IntegerField(
        required=False, min_value=1, max_value=3650, label="Expires after (days)",
        help_text="Leave empty for a token that does not expire.",
    )


class DeviceCodeForm(forms.Form):
    """The code ``slipway login`` shows in the terminal (``?code=`` fills it in)."""

    code = forms.CharField(max_length=20, label="Code", help_text="The code your terminal shows, e.g. BCDF-GHJK.")


class DeviceApproveForm(ApiTokenForm):
    """The token the waiting command line gets: named and expiring as on the API-tokens page."""

    code = forms.CharField(max_length=20, widget=forms.HiddenInput)


class AddMemberForm(ServiceErrorsForm):
    username = forms.CharField(max_length=150, help_text="Someone who already has a Slipway account.")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class RoleForm(ServiceErrorsForm):
    role = forms.ChoiceField(choices=Role.choices)


class TeamSettingsForm(forms.Form):
    members_may_cancel_teammates_work = forms.BooleanField(
        required=False, label="Members may cancel their teammates' runs and delete their endpoints",
        help_text="Admins always may; members may always end their own work; viewers never.",
    )


class AlertSettingsForm(ServiceErrorsForm):
    """A team's own alert rules (:mod:`workloads.telemetry.alert_settings`): each empty for the platform's, or tighter."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for field in FIELDS:
            help_text = f"Empty: the platform's ({field.default:g} {field.unit}); a team may only tighten it."
            label = f"{field.label} ({field.unit})"
            self.fields[field.name] = (forms.IntegerField(required=False, label=label, help_text=help_text)
                                       if field.minutes else
                                       forms.FloatField(required=False, label=label, help_text=help_text))


class ClaimsPreviewForm(forms.Form):
    """A claims document (an ID token's or userinfo's JSON) for the staff preview of single sign-on.

    Valid when it is a JSON object with the groups claim (``SLIPWAY_OIDC_GROUPS_CLAIM``): the same
    reading a sign-in makes, so what the preview refuses, a sign-in refuses too.
    """

    claims = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 12, "cols": 80, "spellcheck": "false"}), max_length=100_000,
        help_text='The decoded ID token or userinfo response, e.g. {"sub": "alice", "groups": ["gpu-ml"]}.',
    )

    def clean_claims(self) -> dict:
        try:
            claims = json.loads(self.cleaned_data["claims"])
        except json.JSONDecodeError as exc:
            raise ValidationError(f"Not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).") from None
        if not isinstance(claims, dict):
            raise ValidationError("A claims document is a JSON object ({…}).")
        try:
            self.groups = claim_groups(claims)
        except MissingGroupsClaimError as exc:
            raise ValidationError(f"{exc} A sign-in with these claims is refused.") from None
        return claims
