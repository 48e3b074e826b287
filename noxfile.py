"""The full support matrix: CPython 3.10-3.13 x Tornado 6.2-6.6, and 3.14 and 3.15.

PYENV_VERSION=3.11.7:3.10.13:3.12.1:3.13.0 nox          # every cell
nox -s "tests-3.13(tornado='6.6')"                       # one cell
nox -s "tests_sid(minor='3.15')"                         # Debian sid's 3.15 (root)
"""

from __future__ import annotations

import os
import shlex

import nox

nox.options.default_venv_backend = "venv"

#: What ruff checks and formats (mypy reads its files from pyproject.toml).
LINTED = ["fastloop", "pytest_fastloop.py", "tests", "bench", "noxfile.py"]

PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
TORNADOS = ["6.2", "6.3", "6.4", "6.5", "6.6"]
#: CPythons this machine's Debian lacks: Debian sid's, in a chroot that
#: .ci/sid_pythons.sh builds once (as root), with the newest Tornado.
SID_PYTHONS = ["3.14", "3.15"]


@nox.session(python=PYTHONS)
@nox.parametrize("tornado", TORNADOS)
def tests(session: nox.Session, tornado: str) -> None:
    if tornado == "6.6" and session.python == "3.10":
        session.skip("Tornado 6.6 needs Python >= 3.11")
    session.install(f"tornado=={tornado}.*", ".[test]")
    # The pytest script, not `python -m pytest`: that would put the checkout
    # first on sys.path, and the tests must import the installed wheel.
    session.run("pytest", "-q", *session.posargs, env={"CI": "true"})


@nox.session(python=False)
@nox.parametrize("minor", SID_PYTHONS)
def tests_sid(session: nox.Session, minor: str) -> None:
    """The README's test command on Debian sid's CPython ``minor``."""
    here = os.getcwd()
    venv = f"/tmp/fastloop-sid-{minor}"
    command = (
        f"cd {shlex.quote(here)} && python{minor} -m venv {venv} && "
        f"{venv}/bin/pip install -q '.[test]' && "
        f"CI=true {venv}/bin/pytest -q {shlex.join(session.posargs)}"
    )
    session.run(
        "bash", ".ci/sid_pythons.sh", "--bind", here, "bash", "-c", command,
        external=True,
    )  # fmt: skip


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    session.install(".[lint]")
    session.run("ruff", "check", *LINTED)
    session.run("ruff", "format", "--check", *LINTED)
    session.run("mypy")
