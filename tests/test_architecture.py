"""The rooms of the code and the rules between them (docs/architecture.md), checked on the import graph.

Every ``import`` and ``from ... import`` in the package counts, wherever it stands: at the top, inside a
function (lazy) or under ``TYPE_CHECKING``. A lazy import is still a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# package folder -> module prefix (pyproject.toml's package-dir)
ROOTS = {"harness": "diageval", "diagnosers": "diageval.diagnosers", "scoring": "diageval.scoring", "reports": "diageval.reports"}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, prefix in ROOTS.items():
        for f in (REPO / folder).rglob("*.py"):
            parts = list(f.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([prefix, *parts])] = f
    return out


MODULES = _modules()


def _target(name: str) -> str | None:
    """The project module an imported dotted name lives in (the longest known prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for n in names:
            t = _target(n)
            if t is not None and t != module:
                found.add(t)
    return found


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _room(module: str) -> str:
    return module.split(".")[1] if "." in module else "diageval"


def test_the_package_is_found():
    assert "diageval.run.pipeline" in GRAPH and "diageval.scoring.verdicts" in GRAPH
    assert "diageval.bundle.kineto" in GRAPH["diageval.bundle.trace_summary"]


def test_no_import_cycle():
    # Tarjan's strongly connected components; package __init__ modules hold no code here.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert cycles == [], f"import cycles: {cycles}"


def _violations(source_prefix: str, allowed) -> list[str]:
    bad = []
    for m, deps in GRAPH.items():
        if m == source_prefix or m.startswith(source_prefix + "."):
            bad += [f"{m} imports {d}" for d in sorted(deps) if not allowed(d)]
    return bad


def test_scoring_imports_nothing_from_run_recording_or_reports():
    forbidden = ("diageval.run", "diageval.recording", "diageval.reports")
    assert _violations("diageval.scoring", lambda d: not d.startswith(forbidden)) == []


def test_diagnosers_import_only_the_bundle_diagnosis_and_taxonomy():
    allowed = ("diageval.bundle", "diageval.diagnosis", "diageval.cases.taxonomy", "diageval.diagnosers", "diageval.validation")
    assert _violations("diageval.diagnosers", lambda d: d.startswith(allowed)) == []


def test_reports_import_nothing_from_diagnosers_or_recording():
    forbidden = ("diageval.diagnosers", "diageval.recording")
    assert _violations("diageval.reports", lambda d: not d.startswith(forbidden)) == []


def test_grading_never_imports_the_runner():
    assert "diageval.run.pipeline" not in GRAPH["diageval.run.grade"]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("diageval.scoring")))
def test_scoring_does_no_file_io(module):
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    io_calls = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "unlink"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in io_calls:
                found.append(f"line {node.lineno}: {name}()")
    assert found == [], f"{module} does file I/O: {found}"


def test_module_sizes_are_explained():
    """A module over ~400 lines says why at its top (a line starting 'Size:' in its docstring)."""
    long = []
    for m, p in MODULES.items():
        text = p.read_text(encoding="utf-8")
        if text.count("\n") > 400:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "Size:" not in doc:
                long.append(f"{p.relative_to(REPO)} ({text.count(chr(10))} lines)")
    assert long == []


def test_rooms_are_folders():
    """Each stage of the flow is a folder of its own; the package top holds only shared foundations."""
    top = sorted(m for m in MODULES if m.count(".") == 1 and _room(m) in {p.stem for p in (REPO / "harness").glob("*.py")})
    assert set(top) <= {"diageval.cli", "diageval.__main__", "diageval.diagnosis", "diageval.fileio",
                        "diageval.paths", "diageval.validation", "diageval.progress"}, top
    rooms = defaultdict(int)
    for m in MODULES:
        rooms[_room(m)] += 1
    for room in ("cases", "bundle", "recording", "run", "diagnosers", "scoring", "reports"):
        assert rooms[room] > 1, room
