"""HTML routes of the quotas app for team members (staff pages: admin_urls.py)."""

from django.urls import path

from quotas import views

app_name = "quotas"

urlpatterns = [
    path("usage/", views.usage, name="usage"),
]
