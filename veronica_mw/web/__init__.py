"""ASGI and WSGI middlewares, problem+json refusals and the ASGI/WSGI vocabulary."""
