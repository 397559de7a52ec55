"""The project's URLconf with the notebook kind's routes included, as ``portal/urls.py`` includes each kind's."""

from django.urls import include, path

from portal.urls import urlpatterns as portal_urlpatterns

urlpatterns = [path("", include("tests.workloads.tinykind.urls")), *portal_urlpatterns]
