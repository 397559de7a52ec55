"""HTML routes of the quotas app."""

urlpatterns: list = []
