"""Forms of the Notifications page: a member's e-mail subscriptions, an admin's new webhook."""

from django import forms

from core.forms import ServiceErrorsForm
from notifications import vocabulary
from notifications.constants import MAX_URL_LENGTH


class EmailForm(ServiceErrorsForm):
    kinds = forms.MultipleChoiceField(
        choices=vocabulary.choices, required=False, widget=forms.CheckboxSelectMultiple, label="E-mail me when",
        help_text="About this team's work; sent to your account's e-mail address.")


class WebhookForm(ServiceErrorsForm):
    url = forms.CharField(max_length=MAX_URL_LENGTH, label="URL", help_text="http(s); gets a signed JSON POST.")
    kinds = forms.MultipleChoiceField(choices=vocabulary.choices, widget=forms.CheckboxSelectMultiple,
                                      label="Send when")
