"""tox inline plugin: lets tox-uv find every Python that pyenv installed (3.10 to 3.13 for the core-py* envs).

pyenv's shims answer only for the versions made active (``pyenv global``, or ``PYENV_VERSION``, which
pyenv's own shim sets for the tox it starts); uv stops at a shim that answers "command not found".
Appending every other installed version to ``PYENV_VERSION`` (the active ones stay first, so
``python`` is unchanged) makes each ``python3.X`` shim resolve, without touching the machine's pyenv
setup. Nothing happens without pyenv.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tox.config.sets import ConfigSet, EnvConfigSet
from tox.plugin import impl
from tox.session.state import State


def _pyenv_versions() -> list[str]:
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    versions = root / "versions"
    if not versions.is_dir():
        return []
    active = [v for v in os.environ.get("PYENV_VERSION", "").split(":") if v]
    if not active:
        try:
            done = subprocess.run(["pyenv", "version-name"], capture_output=True, text=True, timeout=30)
            active = [v for v in done.stdout.strip().split(":") if v] if done.returncode == 0 else []
        except OSError:
            pass
    installed = sorted(p.name for p in versions.iterdir() if (p / "bin").is_dir())
    return active + [v for v in installed if v not in active]


@impl
def tox_add_core_config(core_conf: ConfigSet, state: State) -> None:  # noqa: ARG001 - tox's hook signature
    versions = _pyenv_versions()
    if versions:
        os.environ["PYENV_VERSION"] = ":".join(versions)


@impl
def tox_add_env_config(env_conf: EnvConfigSet, state: State) -> None:  # noqa: ARG001 - tox's hook signature
    # tox runs `uv venv` (and everything else) with each env's own environment: let the list through,
    # packaging envs (.pkg-cpython310) included.
    if "PYENV_VERSION" in os.environ:
        env_conf["pass_env"].append("PYENV_VERSION")
