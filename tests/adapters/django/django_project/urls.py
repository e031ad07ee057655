from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("steps/<int:n>", views.steps),
    path("stream/<int:n>", views.stream),
    path("endless", views.endless),
    path("caught", views.caught),
    path("caught-stream", views.caught_stream),
    path("boom", views.boom),
    path("middleware-halt", views.steps, {"n": 0}),
    path("health", views.steps, {"n": 0}),
    path("send", views.send),
]
