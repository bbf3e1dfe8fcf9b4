"""The package list, derived from ``[tool.setuptools.package-dir]`` in pyproject.toml.

Every folder with an ``__init__.py`` under a mapped folder is a package of the wheel, so a
new subpackage is shipped without anyone remembering to list it (pyproject.toml alone
can map folders or find packages, not both)."""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
package_dir = tomllib.loads((HERE / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
setup(
    packages=[
        f"{package}.{sub}" if sub else package
        for package, folder in package_dir.items()
        for sub in ["", *find_packages(HERE / folder)]
    ]
)
