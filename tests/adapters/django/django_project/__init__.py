"""A minimal real Django project for the middleware tests (settings, urls, views, one middleware)."""
