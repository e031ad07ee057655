"""Run one benchmark script under several builds of veronica-mw, interleaved; prints JSON.

    python benchmarks/ab.py --build base=/work/wt/base/.venv/bin/python \\
        --build new=.venv/bin/python --rounds 5 -- bench_budget.py --in-process

Each ``--build NAME=PYTHON[@TREE]`` runs ``PYTHON benchmarks/SCRIPT ARGS`` (the script from this
checkout; ``@TREE`` puts that source tree first on ``PYTHONPATH``), one build after the other,
``--rounds`` times: a burst of load on a shared machine hits every build alike. For every number
in the script's JSON it reports each build's median over the rounds and, against the first build,
their ratio (below 1: smaller than the first build's figure).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def _leaves(data: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        out[prefix] = float(data)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="append", required=True, help="NAME=PYTHON[@TREE]")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT ARGS")
    opts = parser.parse_args()
    script = [a for a in opts.script if a != "--"]
    if not script:
        parser.error("give the script to run after --")
    builds: list[tuple[str, str, str | None]] = []
    for spec in opts.build:
        name, _, rest = spec.partition("=")
        python, _, tree = rest.partition("@")
        if not name or not python:
            parser.error(f"--build {spec!r}: expected NAME=PYTHON[@TREE]")
        builds.append((name, python, tree or None))
    samples: dict[str, dict[str, list[float]]] = {name: {} for name, _, _ in builds}
    for _ in range(opts.rounds):
        for name, python, tree in builds:
            env = dict(os.environ)
            if tree:
                env["PYTHONPATH"] = os.pathsep.join(
                    filter(None, [os.path.abspath(tree), env.get("PYTHONPATH")])
                )
            done = subprocess.run(
                [python, os.path.join(HERE, script[0]), *script[1:]],
                capture_output=True,
                text=True,
                env=env,
                cwd="/",
                check=False,
            )
            if done.returncode != 0:
                sys.exit(f"{name}: {script[0]} failed:\n{done.stderr[-3000:]}")
            for key, value in _leaves(json.loads(done.stdout)).items():
                samples[name].setdefault(key, []).append(value)
    first = builds[0][0]
    medians = {
        name: {k: round(statistics.median(v), 3) for k, v in figures.items()}
        for name, figures in samples.items()
    }
    ratios = {
        name: {
            k: round(v / medians[first][k], 3)
            for k, v in figures.items()
            if medians[first].get(k) not in (None, 0.0)
        }
        for name, figures in medians.items()
        if name != first
    }
    print(
        json.dumps(
            {"script": script, "rounds": opts.rounds, "medians": medians, f"ratio_vs_{first}": ratios},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
