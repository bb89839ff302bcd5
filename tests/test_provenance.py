"""CPU: the benchmark's provenance (bench/provenance.py): the source hash is computed from the files,
is the same for the installed package and the checkout, changes when a kernel source or the
dispatch table changes and not otherwise; git state only from the package's own checkout."""
import shutil
import subprocess
from pathlib import Path

import pytest

from fp8gemm.bench import provenance

ROOT = Path(__file__).resolve().parent.parent


def copy_tree(dst: Path) -> Path:
    for sub in ("kernels_cu", "dispatch", "fp8gemm"):
        shutil.copytree(ROOT / sub, dst / sub, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def test_installed_package_and_checkout_agree():
    installed = provenance.installed_hashes()
    tree = provenance.tree_hashes(ROOT)
    assert installed == tree
    assert installed["source_files"] >= 10          # every .cu / .cuh and the table, not an empty walk
    assert len(installed["source_hash"]) == 64


def test_hash_follows_kernel_sources_and_table_only(tmp_path):
    root = copy_tree(tmp_path / "t")
    base = provenance.tree_hashes(root)

    def edit(rel, text, mode="a"):
        with open(root / rel, mode) as f:
            f.write(text)
        return provenance.tree_hashes(root)

    # not sources: a README, a new non-source file, a Python comment in the host code
    after = edit("kernels_cu/README.md", "\nmore words\n")
    assert after["source_hash"] == base["source_hash"]
    (root / "kernels_cu" / "notes.txt").write_text("x")
    assert provenance.tree_hashes(root)["source_hash"] == base["source_hash"]
    after = edit("fp8gemm/api.py", "\n# a comment\n")
    assert after["source_hash"] == base["source_hash"] and after["host_code_hash"] != base["host_code_hash"]

    # a kernel source: one byte in a header, in a subfolder
    after = edit("kernels_cu/ptx/sync.cuh", " ")
    assert after["source_hash"] != base["source_hash"] and after["kernels_hash"] != base["kernels_hash"]
    assert after["dispatch_table_hash"] == base["dispatch_table_hash"]
    # the dispatch table
    again = edit("dispatch/h200.json", "\n")
    assert again["source_hash"] != after["source_hash"] and again["dispatch_table_hash"] != base["dispatch_table_hash"]
    # a renamed kernel file changes it too (paths are hashed)
    src = root / "kernels_cu" / "epilogue.cuh"
    src.rename(root / "kernels_cu" / "epilogue2.cuh")
    assert provenance.tree_hashes(root)["kernels_hash"] != again["kernels_hash"]


def test_not_a_checkout(tmp_path):
    with pytest.raises(FileNotFoundError, match="no kernels_cu"):
        provenance.tree_hashes(tmp_path)


def test_git_state_only_from_the_package_checkout(tmp_path):
    # a copied tree without .git, inside no repository of its own: null, not the cwd's repository
    root = copy_tree(tmp_path / "copy")
    assert provenance.git_state(root / "fp8gemm") == {"git_revision": None, "git_dirty": None}
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    # a package folder inside some other repository (as when a tree is exported into one): null
    outer = tmp_path / "outer"
    (outer / "vendor" / "fp8gemm").mkdir(parents=True)
    run = lambda *a, cwd=outer: subprocess.run(["git", *a], cwd=cwd, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    assert provenance.git_state(outer / "vendor" / "fp8gemm")["git_revision"] is None
    # the package's own checkout: revision and dirty state
    repo = copy_tree(tmp_path / "repo")
    run("init", "-q", cwd=repo)
    run("add", "-A", cwd=repo)
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x", cwd=repo)
    state = provenance.git_state(repo / "fp8gemm")
    assert len(state["git_revision"]) == 40 and state["git_dirty"] is False
    (repo / "kernels_cu" / "epilogue.cuh").write_text("changed")
    assert provenance.git_state(repo / "fp8gemm")["git_dirty"] is True


def test_provenance_record():
    rec = provenance.provenance()
    import fp8gemm

    assert rec["fp8gemm_version"] == fp8gemm.__version__
    assert rec["source_hash"] == provenance.tree_hashes(ROOT)["source_hash"]
    assert set(rec) >= {"git_revision", "git_dirty", "kernels_hash", "dispatch_table_hash", "host_code_hash"}


def test_installed_layout_hashes_like_the_checkout(tmp_path):
    """pip install puts kernels_cu/, dispatch/ and bench/ inside the fp8gemm package folder
    (pyproject's package-dir); the hashes must not see them twice or differently."""
    pkg = tmp_path / "site" / "fp8gemm"
    shutil.copytree(ROOT / "fp8gemm", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for sub in ("kernels_cu", "dispatch", "bench"):
        shutil.copytree(ROOT / sub, pkg / sub, ignore=shutil.ignore_patterns("__pycache__", "results", "*.md"))
    assert provenance.hashes(pkg / "kernels_cu", pkg / "dispatch", pkg) == provenance.tree_hashes(ROOT)
