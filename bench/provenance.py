"""What a benchmark result was measured on, computed from the files that ran.

The source hash covers what decides the GPU time of a call: the kernel sources (every ``.cu`` and
``.cuh`` under ``kernels_cu/``) and the dispatch table (``dispatch/*.json``). It is a SHA-256 over
the files' paths relative to their folder and their contents, so the installed package
(``fp8gemm.kernels_cu``, ``fp8gemm.dispatch``) and a source checkout (``kernels_cu/``,
``dispatch/``) give the same value, with or without ``.git``. The host code's hash (the Python of
``fp8gemm/`` and ``dispatch/``) is recorded beside it.

Git revision and dirty state are recorded only when the imported package *is* a git checkout's own
``fp8gemm/`` folder (an editable install or a run from the checkout); a package installed into
site-packages, or a tree copied without ``.git``, records null rather than whatever repository the
current directory belongs to.

    python -m fp8gemm.bench.provenance            # the installed package's hashes
    python -m fp8gemm.bench.provenance PATH       # a checkout's (PATH/kernels_cu, PATH/dispatch)
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

KERNEL_SUFFIXES = (".cu", ".cuh")
TABLE_SUFFIXES = (".json",)
HOST_SUFFIXES = (".py",)


def _files(root, suffixes, recursive=True):
    """(relative posix path, traversable) of every file under ``root`` ending in ``suffixes``,
    sorted; ``root`` is a Path or an importlib.resources Traversable."""
    out, stack = [], [("", root)]
    while stack:
        prefix, node = stack.pop()
        for child in node.iterdir():
            rel = f"{prefix}{child.name}"
            if child.is_dir():
                if recursive and child.name != "__pycache__":
                    stack.append((rel + "/", child))
            elif child.name.endswith(suffixes):
                out.append((rel, child))
    return sorted(out, key=lambda t: t[0])


def digest(roots_and_suffixes) -> tuple[str, int]:
    """(hex SHA-256, file count) over [(label, root, suffixes[, recursive])]: each file contributes
    its label, relative path and the SHA-256 of its bytes."""
    h, count = hashlib.sha256(), 0
    for label, root, suffixes, *rest in roots_and_suffixes:
        for rel, node in _files(root, suffixes, *rest):
            h.update(f"{label}/{rel}\0{hashlib.sha256(node.read_bytes()).hexdigest()}\n".encode())
            count += 1
    return h.hexdigest(), count


def hashes(kernels, dispatch, host=None) -> dict:
    """The source hashes of these folders (Paths or Traversables); ``host``: the fp8gemm package
    folder, for the host code's hash."""
    src, n_src = digest([("kernels_cu", kernels, KERNEL_SUFFIXES), ("dispatch", dispatch, TABLE_SUFFIXES)])
    out = {"source_hash": src, "source_files": n_src,
           "kernels_hash": digest([("kernels_cu", kernels, KERNEL_SUFFIXES)])[0],
           "dispatch_table_hash": digest([("dispatch", dispatch, TABLE_SUFFIXES)])[0]}
    if host is not None:
        # the package folder's own modules only: installed, it also holds kernels_cu/, dispatch/
        # and bench/ (pyproject's package-dir), which a checkout keeps beside it
        out["host_code_hash"] = digest([("fp8gemm", host, HOST_SUFFIXES, False),
                                        ("dispatch", dispatch, HOST_SUFFIXES)])[0]
    return out


def installed_hashes() -> dict:
    """Hashes of the imported package's own kernel sources, dispatch table and host code."""
    import fp8gemm

    return hashes(resources.files("fp8gemm.kernels_cu"), resources.files("fp8gemm.dispatch"),
                  Path(fp8gemm.__file__).resolve().parent)


def tree_hashes(root) -> dict:
    """Hashes of a source checkout at ``root`` (its kernels_cu/, dispatch/ and fp8gemm/)."""
    root = Path(root)
    for sub in ("kernels_cu", "dispatch", "fp8gemm"):
        if not (root / sub).is_dir():
            raise FileNotFoundError(f"{root} is not an fp8gemm checkout: no {sub}/ folder")
    return hashes(root / "kernels_cu", root / "dispatch", root / "fp8gemm")


def _git(cwd: Path, *args):
    try:
        res = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def git_state(package_dir) -> dict:
    """{"git_revision", "git_dirty"} of the checkout whose fp8gemm/ folder is ``package_dir``;
    both None when the package does not sit in its own checkout."""
    package_dir = Path(package_dir).resolve()
    top = _git(package_dir, "rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() / "fp8gemm" != package_dir or \
            not (Path(top) / "kernels_cu").is_dir():
        return {"git_revision": None, "git_dirty": None}
    rev = _git(package_dir, "rev-parse", "HEAD")
    status = _git(package_dir, "status", "--porcelain", "--untracked-files=no")
    return {"git_revision": rev, "git_dirty": None if status is None else bool(status)}


def provenance() -> dict:
    """Everything the bench's JSON records about the code that ran."""
    import fp8gemm

    return {"fp8gemm_version": fp8gemm.__version__, **installed_hashes(),
            **git_state(Path(fp8gemm.__file__).resolve().parent)}


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m fp8gemm.bench.provenance",
                                description="print the source hashes (and git state) as JSON")
    p.add_argument("root", nargs="?", help="a source checkout (default: the installed package)")
    args = p.parse_args(argv)
    print(json.dumps(tree_hashes(args.root) if args.root else provenance(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
