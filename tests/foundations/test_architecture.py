"""The rooms of the code and the rules between them (docs/architecture.md), checked on the import graph.

Every ``import`` and ``from ... import`` in the package counts, wherever it stands: at the top, inside a
function (lazy) or under ``TYPE_CHECKING``. A lazy import is still a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest
from locations import REPO

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


def test_nothing_outside_hosting_imports_past_its_face():
    """The trust boundary has one face (``diageval.hosting``'s ``__init__``): a module elsewhere that reached
    into ``diageval.hosting.sandbox`` or ``.worker`` could host a diagnoser around the policy."""
    bad = [f"{m} imports {d}" for m, deps in GRAPH.items() if not m.startswith("diageval.hosting")
           for d in sorted(deps) if d.startswith("diageval.hosting.")]
    assert bad == []


REGISTRIES = ("diageval.recording.faults", "diageval.recording.workloads")


def test_nothing_outside_recording_imports_past_its_face():
    """Recording has one face (``diageval.recording``'s ``__init__``): the run, the executors, hosting and the CLI
    take a case's evidence through ``prepare_case`` under a ``RecordingPolicy`` and never reach into the cache,
    the verification or the launcher. The one exception is the cases room, below recording, which reads the fault
    and workload registries to check a case file (the face imports the case model: through it, a cycle)."""
    bad = [f"{m} imports {d}" for m, deps in GRAPH.items() if not m.startswith("diageval.recording")
           for d in sorted(deps) if d.startswith("diageval.recording.")
           and not (_room(m) == "cases" and d in REGISTRIES)]
    assert bad == []


def test_recordings_face_loads_what_it_names_and_names_what_it_imports():
    """Recording's face loads a name's module on first use (``_EXPORTS``); the imports spelled out under its
    ``TYPE_CHECKING`` (what this file's graph and type checkers read) are exactly that table, and every name
    resolves to what its module defines."""
    import importlib

    import diageval.recording as face

    tree = ast.parse(MODULES["diageval.recording"].read_text(encoding="utf-8"))
    [guarded] = [n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING"]
    spelled = {a.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom) for a in node.names}
    assert spelled == face._EXPORTS
    for name, module in face._EXPORTS.items():
        assert getattr(face, name) is getattr(importlib.import_module(module), name), name


def test_scoring_takes_the_evidence_facts_whole():
    """``score_case`` receives what recording found as one ``EvidenceFacts`` (defined in scoring, which never
    imports recording), not as loose keywords the run copies field by field."""
    import inspect

    from diageval.scoring.results import EvidenceFacts
    from diageval.scoring.verdicts import score_case

    params = inspect.signature(score_case).parameters
    assert "evidence" in params and not set(params) & set(EvidenceFacts.model_fields)


def test_hosting_imports_nothing_of_the_run_scoring_or_reports():
    """Hosting knows diagnosers only by their protocol (``diageval.diagnosers.base``, in the worker)."""
    forbidden = ("diageval.run", "diageval.scoring", "diageval.reports", "diageval.diagnosers")
    allowed = lambda d: d == "diageval.diagnosers.base" or not d.startswith(forbidden)  # noqa: E731
    assert _violations("diageval.hosting", allowed) == []


def test_nothing_outside_the_executors_imports_past_their_face():
    """Where diagnoses run is one room with one face (``diageval.executors``): the run picks an executor from its
    registry and never reaches into Ray's pool or the local slots."""
    bad = [f"{m} imports {d}" for m, deps in GRAPH.items() if not m.startswith("diageval.executors")
           for d in sorted(deps) if d.startswith("diageval.executors.")]
    assert bad == []


def test_the_executors_sit_between_the_run_and_hosting():
    """Executors use hosting only through its face, and nothing of the run, scoring or reports; hosting and
    recording know nothing of them (an executor is added without touching the trust boundary)."""
    forbidden = ("diageval.run", "diageval.scoring", "diageval.reports", "diageval.diagnosers")
    allowed = lambda d: not d.startswith(forbidden) and not d.startswith("diageval.hosting.")  # noqa: E731
    assert _violations("diageval.executors", allowed) == []
    for room in ("diageval.hosting", "diageval.recording"):
        assert _violations(room, lambda d: not d.startswith("diageval.executors")) == []


def test_every_executor_is_one_registry_line_that_meets_the_protocol():
    import importlib

    from diageval.executors import EXECUTORS, ExecutorSpec, executor_for

    for name, target in EXECUTORS.items():
        module, _, cls = target.partition(":")
        assert MODULES.get(module) is not None, f"{name}: {module} is not a module of the package"
        executor = executor_for(ExecutorSpec(kind=name))
        for member in ("session", "records", "prepare", "run"):
            assert callable(getattr(executor, member, None)), f"{name} lacks {member}"
        assert type(executor) is getattr(importlib.import_module(module), cls)


def test_each_face_exports_what_the_doc_says():
    """docs/architecture.md lists each face's exports; the doc and the code's ``__all__`` agree."""
    import re

    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    for package in ("diageval.hosting", "diageval.executors", "diageval.recording"):
        listed = re.search(rf"`{re.escape(package)}` exports: ([^\n]+)", doc)
        assert listed, f"docs/architecture.md does not list what {package} exports"
        names = set(re.findall(r"`(\w+)`", listed.group(1)))
        exported = set(__import__(package, fromlist=["__all__"]).__all__)
        assert names == exported, f"{package}: doc lists {sorted(names - exported)} not exported; exports {sorted(exported - names)} not listed"


def test_user_facing_errors_share_one_base():
    """Every exception class of the harness, scoring and reports derives from ``DiagevalError`` (the CLI maps
    it to an exit code in one place). The diagnosers' own signals (``DiagnoserUnavailable``, ``DiagnoserFailed``)
    never reach a person: the worker turns them into a case's status; nor do private ones (``_Name``), raised
    and caught inside one module."""
    import inspect

    from diageval.errors import DiagevalError

    stray = []
    for m in MODULES:
        if m.startswith("diageval.diagnosers") or m.endswith("__main__") or m.endswith("worker_process"):
            continue
        tree = ast.parse(MODULES[m].read_text(encoding="utf-8"))
        names = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        if not names:
            continue
        mod = __import__(m, fromlist=["_"])
        for name in (n for n in names if not n.startswith("_")):
            obj = getattr(mod, name)
            if inspect.isclass(obj) and issubclass(obj, BaseException) and not issubclass(obj, DiagevalError):
                stray.append(f"{m}.{name}")
    assert stray == []


def test_architecture_doc_names_real_modules_and_every_room():
    """docs/architecture.md is the living design: every module path it names exists, every room is in its table."""
    import re

    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:harness|diagnosers|scoring|reports)/[\w/]+\.py)`", doc))
    named |= {f"harness/{room}/{f}" for room, files in re.findall(r"`harness/(\w+)/`[^|]*\|[^|]*\|([^|]*)\|", doc)
              for f in re.findall(r"`(\w+\.py)`", files)}
    assert named, "the doc names no module"
    missing = sorted(n for n in named if not (REPO / n).is_file())
    assert missing == []
    rooms = {p.name for p in (REPO / "harness").iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert sorted(r for r in rooms if f"`harness/{r}/`" not in doc) == []


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
    assert set(top) <= {"diageval.cli", "diageval.__main__", "diageval.diagnosis", "diageval.fileio", "diageval.errors",
                        "diageval.paths", "diageval.validation", "diageval.progress", "diageval.inert"}, top
    rooms = defaultdict(int)
    for m in MODULES:
        rooms[_room(m)] += 1
    for room in ("cases", "bundle", "recording", "hosting", "executors", "run", "diagnosers", "scoring", "reports"):
        assert rooms[room] > 1, room
