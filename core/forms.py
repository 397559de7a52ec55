"""Form plumbing every app's pages share."""

from django import forms
from django.core.exceptions import ValidationError


class ServiceErrorsForm(forms.Form):
    """A form whose service may still refuse the input with a ``ValidationError`` keyed by field."""

    def add_service_errors(self, error: ValidationError) -> None:
        """Put the service's field errors next to the matching inputs (others above the form)."""
        for field, messages in error.message_dict.items():
            target = field if field in self.fields else None
            for message in messages:
                self.add_error(target, message)
