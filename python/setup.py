"""Wheel build for the rcpu Python package (run through scripts/build_wheel.sh).

The package holds no Python extension, only the plugin library, so the wheel is tagged
`py3-none-<platform>`: any CPython 3 on this platform, but not pure Python.
"""

import pathlib
import re

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    """Holds a native library: installed to platlib, tagged with the platform."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


def crate_version() -> str:
    cargo = (pathlib.Path(__file__).resolve().parent.parent / "Cargo.toml").read_text()
    section = cargo.split("[workspace.package]", 1)[1]
    m = re.search(r'^version\s*=\s*"([^"]+)"', section, re.M)
    if not m:
        raise SystemExit("no [workspace.package] version in Cargo.toml")
    return m.group(1)


version = crate_version()
pathlib.Path(__file__).with_name("rcpu").joinpath("_version.py").write_text(
    f'__version__ = "{version}"\n'
)
setup(version=version, distclass=BinaryDistribution, cmdclass={"bdist_wheel": PlatformWheel})
