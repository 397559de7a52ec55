"""The portal's reservations routes: the calendar page, booking (and its preview), cancelling, and the teams'
iCalendar feeds (a secret URL each: reservations.feed)."""

from django.urls import path

from reservations import views

app_name = "reservations"

urlpatterns = [
    path("reservations/", views.calendar, name="calendar"),
    path("reservations/book/", views.book, name="book"),
    path("reservations/preview/", views.preview, name="preview"),
    path("reservations/<int:pk>/cancel/", views.cancel, name="cancel"),
    path("reservations/feed/<str:token>.ics", views.feed, name="feed"),
]
