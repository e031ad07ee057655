#!/usr/bin/env python
"""Run:  python examples/django_project/manage.py runserver
Then: curl -i localhost:8000/agent?turns=3 ; curl -i localhost:8000/agent?turns=9 (429)
      curl -N localhost:8000/stream?turns=9 (5 lines, then the body ends cleanly)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
