"""Serializers of the portal package's API."""

from rest_framework import serializers

from teams.models import Team


class TeamSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["slug", "name", "role", "namespace", "members_may_cancel_teammates_work"]

    def get_role(self, team) -> str:
        # Annotated by the queryset (one query for the whole page).
        return team.caller_role


# -- `slipway login` in a browser (teams.device; RFC 8628's field names) --------------------------


class DeviceAuthorizationRequestSerializer(serializers.Serializer):
    client_name = serializers.CharField(required=False, allow_blank=True, max_length=64,
                                        help_text="The host the command line runs on: the token is named after it.")


class DeviceAuthorizationSerializer(serializers.Serializer):
    device_code = serializers.CharField(help_text="The command line's secret: poll auth/token/ with it.")
    user_code = serializers.CharField(help_text='What the person checks on the device page, e.g. "BCDF-GHJK".')
    verification_uri = serializers.URLField(help_text="The portal's device page.")
    verification_uri_complete = serializers.URLField(help_text="The device page with the code filled in.")
    expires_in = serializers.IntegerField(help_text="Seconds until both codes expire.")
    interval = serializers.IntegerField(help_text="Seconds to wait between polls.")


class DeviceTokenRequestSerializer(serializers.Serializer):
    grant_type = serializers.ChoiceField(choices=["urn:ietf:params:oauth:grant-type:device_code"])
    device_code = serializers.CharField()


class DeviceTokenSerializer(serializers.Serializer):
    access_token = serializers.CharField(help_text="A personal API token (Authorization: Bearer …).")
    token_type = serializers.ChoiceField(choices=["Bearer"])
    expires_in = serializers.IntegerField(allow_null=True, help_text="Seconds until the token expires; null: never.")


class DeviceGrantErrorSerializer(serializers.Serializer):
    """RFC 8628's error answer, with the API's ``errors`` beside it (its description under ``detail``).

    ``error`` and ``error_description`` come with every refusal of the grant; a body that is not
    JSON at all is refused before, in the API's shape alone (``errors``)."""

    error = serializers.ChoiceField(choices=["authorization_pending", "slow_down", "access_denied", "expired_token",
                                             "invalid_grant", "invalid_request", "unsupported_grant_type"],
                                    required=False)
    error_description = serializers.CharField(required=False)
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))
