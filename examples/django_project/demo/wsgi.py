"""WSGI entry point (gunicorn demo.wsgi, or any WSGI server).

Two equivalent ways to contain requests; this file shows the wrapper, which also covers other
middleware and Django's own error handling. With VeronicaMiddleware in MIDDLEWARE as well, the
wrapper (outer) owns each request and the middleware passes through.
"""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

from veronica_mw.adapters.django import wrap_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")

# Limits from settings.VERONICA; or spell them out:
#   VeronicaWSGIMiddleware(get_wsgi_application(), config=ExecutionConfig(max_cost_usd=0.05, ...))
application = wrap_wsgi_application(get_wsgi_application())
