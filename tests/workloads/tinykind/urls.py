"""The notebook kind's routes: its list and the read views every kind gets from ``workloads.views.read_urls``."""

from django.urls import path

from tests.workloads.tinykind import views
from tests.workloads.tinykind.models import Notebook
from workloads.views import read_urls

app_name = "tinykind"

urlpatterns = [
    path("notebooks/", views.notebook_list, name="notebook-list"),
    *read_urls(Notebook, "notebooks/"),
]
