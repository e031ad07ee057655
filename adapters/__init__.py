"""Framework adapters, imported as ``veronica_mw.adapters.<framework>``.

Each module imports its framework first and raises :class:`veronica_mw.MissingFrameworkError`
(an ``ImportError``) with the ``pip install "veronica-mw[<extra>]"`` line when it is missing.
"""
