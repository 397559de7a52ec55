"""Forms of the portal package: API tokens (and ``slipway login``'s device page), and the Team page's member
management and settings."""

from django import forms
from django.core.exceptions import ValidationError

from teams.models import Role


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


class ServiceErrorsForm(forms.Form):
    """A form whose service may still refuse the input with a ``ValidationError`` keyed by field."""

    def add_service_errors(self, error: ValidationError) -> None:
        """Put the service's field errors next to the matching inputs (others above the form)."""
        for field, messages in error.message_dict.items():
            target = field if field in self.fields else None
            for message in messages:
                self.add_error(target, message)


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
