"""Staff routes of the quotas app, mounted under ``/admin/`` before the admin site (staff only)."""

from django.urls import path

from quotas import views

urlpatterns = [
    path("capacity/", views.capacity, name="admin-capacity"),
    path("showback/", views.showback, name="admin-showback"),
]
