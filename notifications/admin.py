"""The admin console's view of notifications: subscriptions, webhooks (never their secrets) and the delivery log."""

from django.contrib import admin

from notifications.models import Delivery, EmailSubscription, Event, MailServer, Webhook


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "team", "event_kind", "title", "fanned_out_at"]
    list_filter = ["event_kind"]
    search_fields = ["key", "ref", "team__slug"]
    readonly_fields = [f.name for f in Event._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(EmailSubscription)
class EmailSubscriptionAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "event_kind"]
    list_filter = ["event_kind"]
    search_fields = ["user__username", "team__slug"]


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    """Read and delete only: a webhook is added on its team's Notifications page, where its secret is shown once."""

    list_display = ["url", "team", "event_kinds", "secret_prefix", "created_at"]
    search_fields = ["url", "team__slug"]
    fields = ["team", "url", "event_kinds", "secret_prefix", "created_by", "created_at"]
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(MailServer)
class MailServerAdmin(admin.ModelAdmin):
    """Read only: a row is the mail server the settings name, and its backoff while it fails."""

    list_display = ["address", "backoff_until"]
    readonly_fields = ["address", "backoff_until"]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "team", "channel", "target", "status", "attempts", "response_code", "last_error"]
    list_filter = ["status", "channel"]
    search_fields = ["target", "team__slug", "event__key"]
    readonly_fields = [f.name for f in Delivery._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False
