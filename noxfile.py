"""The full support matrix: CPython 3.10-3.13 x Tornado 6.2-6.6.

PYENV_VERSION=3.11.7:3.10.13:3.12.1:3.13.0 nox          # every cell
nox -s "tests-3.13(tornado='6.6')"                       # one cell
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"

#: What ruff checks and formats (mypy reads its files from pyproject.toml).
LINTED = ["fastloop", "pytest_fastloop.py", "tests", "bench", "noxfile.py"]

PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
TORNADOS = ["6.2", "6.3", "6.4", "6.5", "6.6"]


@nox.session(python=PYTHONS)
@nox.parametrize("tornado", TORNADOS)
def tests(session: nox.Session, tornado: str) -> None:
    if tornado == "6.6" and session.python == "3.10":
        session.skip("Tornado 6.6 needs Python >= 3.11")
    session.install(f"tornado=={tornado}.*", ".[test]")
    # The pytest script, not `python -m pytest`: that would put the checkout
    # first on sys.path, and the tests must import the installed wheel.
    session.run("pytest", "-q", *session.posargs, env={"CI": "true"})


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    session.install(".[lint]")
    session.run("ruff", "check", *LINTED)
    session.run("ruff", "format", "--check", *LINTED)
    session.run("mypy")
