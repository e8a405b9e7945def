"""The package version, in one place (pyproject.toml reads it as tfbert.__version__); a module
of its own so that low layers can name the version without importing the package's top level."""

__version__ = "0.1.0"
