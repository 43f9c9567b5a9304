"""statetrack's version, at the bottom of the package so that any module may name it (the trackers'
tags, `statetrack --version`); pyproject.toml declares the same (tests/test_packaging.py)."""

__version__ = "0.1.0"
