"""HTML routes of the jobs app."""

urlpatterns: list = []
