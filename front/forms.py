"""Forms of the portal package: API tokens, and the Team page's member management and settings."""

from django import forms

from core.forms import ServiceErrorsForm
from teams.models import Role


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. 'CI pipeline'.")
    expires_days = forms.IntegerField(
        required=False, min_value=1, max_value=3650, label="Expires after (days)",
        help_text="Leave empty for a token that does not expire.",
    )


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
