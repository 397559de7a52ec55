"""The portal's reservations routes: the teams' iCalendar feeds (a secret URL each: reservations.feed)."""

from django.urls import path

from reservations import views

app_name = "reservations"

urlpatterns = [
    path("reservations/feed/<str:token>.ics", views.feed, name="feed"),
]
