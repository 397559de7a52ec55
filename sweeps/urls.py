"""The portal's sweep pages (included at the site root by portal/urls.py): the team's sweeps, the New sweep form and
its Preview, one sweep (its live part polled through the same URL), its Stop button and a pruned trial's Continue
button. The API's routes are ``portal/api_urls.py``'s."""

from django.urls import path

from sweeps import views

app_name = "sweeps"

urlpatterns = [
    path("sweeps/", views.sweep_list, name="list"),
    path("sweeps/new/", views.sweep_new, name="new"),
    path("sweeps/new/preview/", views.sweep_preview, name="preview"),
    path("sweeps/<int:pk>/", views.sweep_detail, name="detail"),
    path("sweeps/<int:pk>/stop/", views.sweep_stop, name="stop"),
    path("sweeps/<int:pk>/trials/<int:number>/continue/", views.sweep_continue, name="continue-trial"),
]
