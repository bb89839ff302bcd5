"""The checkout's layout as the installed package's: fp8gemm.kernels_cu, .dispatch and .bench.

pyproject's package-dir installs the top-level folders kernels_cu/, dispatch/ and bench/ as
subpackages of fp8gemm. In a checkout they sit beside fp8gemm/, and from the repository root
Python imports the checkout's fp8gemm/ before any installed copy (the current directory is first
on sys.path): without a mapping, ``import fp8gemm`` fails there on ``fp8gemm.dispatch``. An
editable install maps the three names for its own checkout; ``map_subpackages`` does the same for
whichever checkout is imported, so that ``python -m fp8gemm``, the tests and the benchmark run from
the root after a plain install too. Installed, the subpackages are folders of fp8gemm/ and nothing
is mapped.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

SUBPACKAGES = ("kernels_cu", "dispatch", "bench")      # pyproject.toml: [tool.setuptools.package-dir]


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ``<package>.<sub>`` for the SUBPACKAGES in the checkout's root folder."""

    def __init__(self, package: str, root: str):
        self.package, self.root = package, root

    def find_spec(self, fullname, path=None, target=None):
        parent, _, sub = fullname.rpartition(".")
        if parent != self.package or sub not in SUBPACKAGES:
            return None
        folder = os.path.join(self.root, sub)
        return importlib.util.spec_from_file_location(fullname, os.path.join(folder, "__init__.py"),
                                                      submodule_search_locations=[folder])

    def __repr__(self):
        return f"<fp8gemm checkout finder: {self.root}>"


def map_subpackages(package: str, package_path) -> bool:
    """Map the SUBPACKAGES onto the checkout's top-level folders where ``package_path`` (the
    package's __path__) lacks them and its parent folder holds them; True if it did."""
    here = os.path.abspath(list(package_path)[0])
    root = os.path.dirname(here)
    if all(os.path.isdir(os.path.join(here, sub)) for sub in SUBPACKAGES):
        return False                  # installed: the subpackages ship inside the package
    if not all(os.path.isfile(os.path.join(root, sub, "__init__.py")) for sub in SUBPACKAGES):
        return False
    if not any(isinstance(f, _CheckoutFinder) and f.root == root for f in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutFinder(package, root))
    return True
