"""Routes of the Notifications page (mounted at the root, beside the Team page)."""

from django.urls import path

from notifications import views

urlpatterns = [
    path("teams/<slug:team>/notifications/", views.notifications_page, name="notifications"),
    path("teams/<slug:team>/notifications/email/", views.set_email, name="notifications-email"),
    path("teams/<slug:team>/notifications/webhooks/", views.add_webhook, name="notifications-webhook-add"),
    path("teams/<slug:team>/notifications/webhooks/<int:pk>/delete/", views.delete_webhook,
         name="notifications-webhook-delete"),
]
