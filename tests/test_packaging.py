"""Every package of the source tree is listed in pyproject.toml, so a wheel (a non-editable
install) ships all of tierlog: the editable install used by the tests finds unlisted
subpackages anyway, which is how tierlog.spark once went missing from the list unnoticed."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_source_package_is_listed() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for package, directory in setuptools["package-dir"].items():
        base = ROOT / directory
        for init in base.rglob("__init__.py"):
            relative = init.parent.relative_to(base)
            found.add(".".join([package, *relative.parts]))
    assert found - listed == set(), "packages missing from [tool.setuptools] packages"
    assert listed - found == set(), "listed packages with no source directory"
