"""CPU: the import graph of the installed packages has no circle, and the library never imports its
benchmark. dispatch/, kernels_cu/ and bench/ are read as the fp8gemm.* packages they install as;
every import counts, at module level or inside a function."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"fp8gemm": "fp8gemm", "dispatch": "fp8gemm.dispatch", "kernels_cu": "fp8gemm.kernels_cu",
            "bench": "fp8gemm.bench"}


def _modules():
    mods = {}
    for folder, pkg in PACKAGES.items():
        for f in (ROOT / folder).rglob("*.py"):
            parts = [p for p in f.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            mods[".".join([pkg] + parts)] = f
    return mods


def _targets(name, path, node, mods):
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for _ in range(max(node.level - 1, 0)):
        base = base.rpartition(".")[0]
    mod = (base + ("." + node.module if node.module else "")) if node.level else node.module
    subs = [f"{mod}.{a.name}" for a in node.names]
    return subs if all(s in mods for s in subs) else [mod] + subs     # `from pkg import submodule`


def import_graph():
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _targets(name, path, node, mods):
                    while t and t not in mods:
                        t = t.rpartition(".")[0]
                    if t and t != name:
                        deps.add(t)
        graph[name] = deps
    return graph


def _circles(graph):
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_circle():
    graph = import_graph()
    assert "fp8gemm.compile_ahead" in graph and "fp8gemm.dispatch.selector" in graph
    circles = _circles(graph)
    assert not circles, "\n".join(" <-> ".join(c) for c in circles)


def test_circle_finder_finds_one():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_library_never_imports_the_benchmark():
    graph = import_graph()
    bad = {m: sorted(d for d in deps if d.startswith("fp8gemm.bench"))
           for m, deps in graph.items() if not m.startswith("fp8gemm.bench")}
    assert not {m: d for m, d in bad.items() if d}


def test_product_comments_name_files_that_exist():
    """Paths like tools/x.py or lab/x.py in the shipped code's comments point at real files."""
    missing = []
    for folder in PACKAGES:
        for f in (ROOT / folder).rglob("*"):
            if f.suffix not in (".py", ".cu", ".cuh"):
                continue
            for ref in re.findall(r"\b((?:tools|lab)/[\w./-]+\.(?:py|c|sh|cu))\b", f.read_text()):
                if not (ROOT / ref).exists():
                    missing.append(f"{f.relative_to(ROOT)}: {ref}")
    assert not missing, missing
