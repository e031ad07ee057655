"""Run ``mypy --strict`` on adapter modules as the package ships them.

Adapters live in ``adapters/`` but are imported as ``veronica_mw.adapters.<fw>`` (setuptools
package-dir) and use relative imports, which mypy cannot resolve from the source layout. This
builds a throwaway mirror of the installed layout out of symlinks and checks it.

Usage: python tools/typecheck_adapters.py <module> [<module> ...] [-- <extra paths for mypy>]
e.g.   python tools/typecheck_adapters.py langchain langgraph -- tests/adapters/langchain
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    modules, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    if not modules:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="veronica-mypy-") as tmp:
        package = Path(tmp) / "veronica_mw"
        package.mkdir()
        for entry in (ROOT / "veronica_mw").iterdir():
            if entry.suffix in {".py", ".typed"} or (entry.is_dir() and entry.name != "__pycache__"):
                (package / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
        (package / "adapters").symlink_to(ROOT / "adapters", target_is_directory=True)
        targets = [arg for module in modules for arg in ("-p", f"veronica_mw.adapters.{module}")]
        env = dict(os.environ, MYPYPATH=tmp)
        cmd = [sys.executable, "-m", "mypy", "--strict", *targets]
        status = subprocess.call(cmd, cwd=tmp, env=env)
        if extra:
            status |= subprocess.call(
                [sys.executable, "-m", "mypy", "--strict", "--explicit-package-bases", *extra],
                cwd=ROOT,
                env=env,
            )
        return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
