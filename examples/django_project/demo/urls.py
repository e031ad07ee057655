from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("agent", views.agent),
    path("stream", views.stream),
    path("health", views.health),
]
