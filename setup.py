"""setuptools shim for tools that call setup.py (`python setup.py --version`, older pip and
build backends). pyproject.toml is the one package definition: setuptools reads everything
from it."""

from setuptools import setup

setup()
