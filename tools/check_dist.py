"""Checks what ``python -m build`` made: ``python tools/check_dist.py DIST_DIR`` (the ``package`` tox env).

The sdist and the wheel must each hold the package (every module under veronica_mw/, py.typed, the
adapters as veronica_mw/adapters/), and neither may ship the tests or a top-level ``adapters``
package. The wheel must declare the console script. Exits 1 with one line per problem.
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def expected_modules() -> set[str]:
    """Paths (inside the installed tree) the wheel must hold, from the source tree."""
    package = ROOT / "veronica_mw"
    found = {f"veronica_mw/{p.relative_to(package)}" for p in package.rglob("*.py")}
    found |= {f"veronica_mw/adapters/{p.name}" for p in (ROOT / "adapters").glob("*.py")}
    found.add("veronica_mw/py.typed")
    return found


def problems_in(names: set[str], what: str, prefix: str = "") -> list[str]:
    stripped = {name[len(prefix) :] for name in names if name.startswith(prefix)}
    problems = [f"{what}: missing {path}" for path in sorted(expected_modules() - stripped)]
    if prefix:  # the sdist holds the source layout: adapters/ at the top, mapped at install
        problems = [p for p in problems if "veronica_mw/adapters/" not in p]
        problems += [
            f"{what}: missing adapters/{Path(p).name}"
            for p in sorted({f"veronica_mw/adapters/{q.name}" for q in (ROOT / "adapters").glob("*.py")})
            if f"adapters/{Path(p).name}" not in stripped
        ]
    for name in sorted(stripped):
        top = name.split("/", 1)[0]
        if top == "tests" or "/tests/" in name or name.startswith("tests/"):
            problems.append(f"{what}: ships test file {name}")
        if not prefix and top == "adapters":
            problems.append(f"{what}: ships a top-level adapters package ({name})")
    return problems


def main(dist: Path) -> int:
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    problems = [] if len(wheels) == 1 and len(sdists) == 1 else [f"want one wheel and one sdist in {dist}"]
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            problems += problems_in(names, wheel.name)
            entry_points = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
            text = archive.read(entry_points[0]).decode() if entry_points else ""
            if "veronica-mw = veronica_mw.cli:main" not in text:
                problems.append(f"{wheel.name}: no veronica-mw console script")
    for sdist in sdists:
        with tarfile.open(sdist) as archive:
            names = {member.name for member in archive.getmembers() if member.isfile()}
        top = sdist.name.removesuffix(".tar.gz") + "/"
        problems += problems_in(names, sdist.name, prefix=top)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"ok: {', '.join(p.name for p in wheels + sdists)}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
