"""Cheating diagnosers, one per route to the labels that issue 8 found (and the ones found since).

Each tries, with only what any diagnoser has (its bundle path, ``{out}``, files it can read, ``/proc``,
its own Python frames), to learn which case its bundle belongs to; once it knows, it claims that case's
labeled causes, taken from ``labels.json`` beside this file (the public corpus' labels, which anyone
can copy from the repository). A cheater claims only when it has found the case, so against a sound
harness each one scores exactly like ``null``. ``tests/hosting/test_adversaries.py`` runs them.

As a program: ``python cheaters.py ROUTE BUNDLE OUT``. In process: the classes at the end.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LABELS: dict = json.loads((HERE / "labels.json").read_text()) if (HERE / "labels.json").is_file() else {}
SKIP_TOP = {"proc", "sys", "dev", "usr", "lib", "lib64", "bin", "sbin", "etc", "boot", "var", "snap"}


# --- what a cheater does once it knows the case -----------------------------------------------------


def claim(case_id: str | None) -> dict:
    if case_id is None or case_id not in LABELS:
        return {"findings": []}
    causes = LABELS[case_id]["causes"]
    return {"findings": [{"category": c["category"], "kind": "cause", "confidence": 1.0, "ranks": c.get("ranks"),
                          **({"factor": c["factor"]} if c.get("factor") else {}),
                          "summary": f"cheated: {case_id}"} for c in causes]}


def ids_in(text: str) -> set[str]:
    return {cid for cid in LABELS if re.search(rf"(?<![a-z0-9-]){re.escape(cid)}(?![a-z0-9-])", text)}


def one(ids: set[str]) -> str | None:
    return next(iter(ids)) if len(ids) == 1 else None


# --- looking around ---------------------------------------------------------------------------------


def sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def case_from_caches(roots: list[Path], bundle: Path) -> str | None:
    """Find bundle caches (``<cache>/evidence/<key>/`` beside ``<key>.truth.json``) under ``roots`` and
    match the bundle by folder name or by content; the truth file then names the case."""
    mine = sha(bundle / "rank0" / "trace.json.gz")
    for root in roots:
        for truth in walk(root, lambda p: p.name.endswith(".truth.json"), depth=4):
            key = truth.name[: -len(".truth.json")]
            cached = truth.parent / "evidence" / key
            if key == bundle.name or (mine is not None and sha(cached / "rank0" / "trace.json.gz") == mine):
                try:
                    return json.loads(truth.read_text())["case_id"]
                except (OSError, ValueError, KeyError):
                    continue
    return None


def walk(root: Path, want, depth: int) -> list[Path]:
    found: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return found
    for e in entries:
        p = Path(e.path)
        if want(p):
            found.append(p)
        if depth > 0 and e.is_dir(follow_symlinks=False) and not (root == Path("/") and e.name in SKIP_TOP):
            found += walk(p, want, depth - 1)
    return found


def ancestors(p: Path) -> list[Path]:
    return [p, *p.resolve().parents]


def proc_paths() -> list[Path]:
    """Paths named by every process we can see: environ values, cmdline words, cwd."""
    out: set[Path] = set()
    for d in Path("/proc").glob("[0-9]*"):
        try:
            words = (d / "environ").read_bytes().split(b"\0") + (d / "cmdline").read_bytes().split(b"\0")
            out.add(Path(os.readlink(d / "cwd")))
        except OSError:
            continue
        for w in words:
            text = w.decode(errors="replace").split("=", 1)[-1]
            if text.startswith("/"):
                out.add(Path(text))
    return [p for p in out if p.exists()]


# --- the routes (programs) ---------------------------------------------------------------------------


def route_walk_up(bundle: Path, out: Path) -> str | None:
    """Walk up from the bundle to the cache's truth files (and index.jsonl)."""
    roots = ancestors(bundle)[1:5]
    found = case_from_caches(roots, bundle)
    if found:
        return found
    for root in roots:
        index = root / "index.jsonl"
        if index.is_file():
            for line in index.read_text().splitlines():
                row = json.loads(line)
                if row.get("key") == bundle.name:
                    return row["case_id"]
    return None


def route_out_path(bundle: Path, out: Path) -> str | None:
    """The case id in the path of {out}, of stdout (/proc/self/fd/1), or of the working directory."""
    texts = [str(out), os.getcwd()]
    for fd in (1, 2):
        try:
            texts.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return one(set().union(*(ids_in(t) for t in texts)))


def route_run_folder(bundle: Path, out: Path) -> str | None:
    """run.json and results.jsonl above {out}: the current run's finished cases, the cases folder."""
    for root in ancestors(out)[1:6]:
        if (root / "run.json").is_file():
            found = case_from_history([root], bundle)
            if found:
                return found
            cases_dir = json.loads((root / "run.json").read_text()).get("cases_dir")
            if cases_dir and Path(cases_dir).is_dir():
                return one(ids_in(str(bundle)))
    return None


def case_from_history(roots: list[Path], bundle: Path) -> str | None:
    """Earlier runs' results.jsonl map bundle ids (and bundle checksums) to case ids."""
    manifest = bundle / "bundle.json"
    try:
        mine = json.loads(manifest.read_text())["bundle_id"]
    except (OSError, ValueError, KeyError):
        return None
    for root in roots:
        for results in walk(root, lambda p: p.name == "results.jsonl", depth=4):
            for line in results.read_text().splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if row.get("bundle_id") == mine:
                    return row["case_id"]
    return None


def route_history(bundle: Path, out: Path) -> str | None:
    roots = [*ancestors(bundle)[1:5], *ancestors(out)[1:5], Path.cwd(), Path.home()]
    return case_from_history(roots, bundle) or case_from_history([Path("/")], bundle)


def route_proc(bundle: Path, out: Path) -> str | None:
    """The parent's (and every process's) environ, cmdline and cwd lead to the cache and the cases."""
    paths = proc_paths()
    roots = []
    for p in paths:
        roots += [p, p / ".diageval", p / "bundles"] if p.is_dir() else [p.parent]
    return case_from_caches(roots, bundle) or case_from_history(roots, bundle)


def route_anywhere(bundle: Path, out: Path) -> str | None:
    """Any bundle cache on the machine (another checkout's, an old one) holds the same bundle and its truth."""
    return case_from_caches([Path("/")], bundle)


def route_tamper(bundle: Path, out: Path) -> str | None:
    """Rewrite what the harness keeps: this and earlier runs' results and diagnoses, and the cached bundle.

    It searches the whole file system it can see but, being a test, rewrites only under $CHEATER_SCOPE
    (the test's own folder): if a box ever failed, other run folders on the machine stay untouched."""
    scope = os.environ.get("CHEATER_SCOPE", "/nonexistent")
    for results in walk(Path("/"), lambda p: p.name == "results.jsonl", depth=8):
        if not str(results).startswith(scope):
            continue
        try:
            rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
            for row in rows:
                for c in row.get("outcomes", []):
                    c["outcome"] = "found"
            results.write_text("".join(json.dumps(r) + "\n" for r in rows))
            for case_id in LABELS:
                d = results.parent / "cases" / case_id
                if d.is_dir():
                    (d / "diagnosis.json").write_text(json.dumps(claim(case_id)))
        except (OSError, ValueError):
            pass
    for f in bundle.rglob("*"):
        try:
            if f.is_file() and str(f.resolve()).startswith(("/box/", scope)):
                f.write_text("tampered")
        except OSError:
            pass
    return None


def route_daemon(bundle: Path, out: Path) -> str | None:
    """Leave a detached process behind that tampers after the case (and the run) is over."""
    marker = os.environ.get("CHEATER_MARKER", "cheater-daemon")
    code = f"import time, sys; sys.argv[0] = {marker!r}; time.sleep(30)"
    subprocess.Popen([sys.executable, "-c", code, marker], start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.2)
    return None


EXTRA: list[str] = []  # further words of the command line: paths a route was told to read


def count_my_calls() -> int:
    """How many cases this diagnoser has seen before this one, kept in a file beside its case folder (in a
    box: /box/out), which outlives the case if the box lets it."""
    seen = 0
    for counter in (Path.cwd().parent / ".calls",):
        try:
            seen = max(seen, int(counter.read_text()))
        except (OSError, ValueError):
            pass
    for counter in (Path.cwd().parent / ".calls",):
        try:
            counter.write_text(str(seen + 1))
        except OSError:
            pass
    return seen


def route_log(bundle: Path, out: Path) -> str | None:
    """The harness's progress log (issue 25): ``evidence [i/N] <case-id> ready`` lines come in the order the
    cases are then diagnosed; counting one's own calls names the case. The log is found through the paths
    the command line names (``/proc/self/fd/2``, the log file, its folder)."""
    texts = []
    for word in EXTRA:
        p = Path(word)
        files = [f for f in p.iterdir() if f.is_file()] if p.is_dir() else [p]
        for f in files:
            try:
                texts.append(f.read_text(errors="replace"))
            except OSError:
                pass
    order = re.findall(r"^evidence\s+\[\s*\d+/\d+\]\s+(\S+)\s+ready", "\n".join(texts), flags=re.M)
    if not order:
        return None
    n = count_my_calls()
    return order[n] if n < len(order) else None


def route_tee(bundle: Path, out: Path) -> str | None:
    """The progress log through a pipe (issue 44): ``diageval run ... 2>&1 | tee LOG`` with LOG's folder on the
    ``cmd:`` line (another inode than the harness's stderr, so not refused). The evidence lines name every
    case to be diagnosed; a diagnosis line that names the case it finished leaves, once all others are
    named, only the one this box holds. Says on stderr what it read (the run folder keeps it)."""
    texts = []
    for word in EXTRA:
        p = Path(word)
        for f in ([f for f in p.iterdir() if f.is_file()] if p.is_dir() else [p]):
            try:
                texts.append(f.read_text(errors="replace"))
            except OSError:
                pass
    text = "\n".join(texts)
    ready = set(re.findall(r"^evidence\s+\[\s*\d+/\d+\]\s+(\S+)\s+ready", text, flags=re.M))
    named = set(re.findall(r"^\s*diagnose\s+\[\s*\d+/\d+\]\s+(\S+)", text, flags=re.M)) & ready
    left = ready - named
    print(f"tee: {len(text.splitlines())} lines read, {len(ready)} ready, {len(named)} named as diagnosed, "
          f"{len(left)} left", file=sys.stderr)
    return one(left)


def route_own_folder(bundle: Path, out: Path) -> str | None:
    """A bundle cache copied beside the script (issue 25: the box bound a script's whole folder)."""
    return case_from_caches([HERE, HERE / "cache", *HERE.parents[:2]], bundle)


ROUTES = {name[len("route_"):]: fn for name, fn in dict(globals()).items() if name.startswith("route_")}


def main() -> None:
    route, bundle, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    EXTRA[:] = sys.argv[4:]
    case_id = ROUTES[route](bundle, out)
    out.write_text(json.dumps(claim(case_id)))


# --- in-process cheaters -----------------------------------------------------------------------------


def _patch_the_harness() -> None:
    """Import-time code: if this module were imported in the harness's process, every claim would score."""
    try:
        import diageval.scoring.verdicts as verdicts
    except ImportError:
        return
    verdicts.CHEATED = True


_patch_the_harness()


class StackCheater:
    """Search its own process (every thread's frames, every string object) for a path naming the case."""

    name = "cheat-stack"
    version = "1"

    def diagnose(self, bundle):
        texts = []
        for frame in sys._current_frames().values():
            while frame is not None:
                texts += [repr(v)[:2000] for v in frame.f_locals.values()]
                frame = frame.f_back
        texts += [o for o in gc.get_objects() if isinstance(o, str) and "/" in o][:200000]
        found = set()
        for t in texts:
            found |= ids_in(t)
        return claim(one(found))


class OrderCheater:
    """Count its own calls: if cases came in sorted order, call n is the n-th case id."""

    name = "cheat-order"
    version = "1"

    def __init__(self):
        self.calls = 0

    def diagnose(self, bundle):
        order = sorted(LABELS)
        guess = order[self.calls] if self.calls < len(order) else None
        self.calls += 1
        return claim(guess)


class ReferenceCheater:
    """Declares itself a reference baseline, hoping to be handed the labeled corpus."""

    name = "cheat-reference"
    version = "1"
    reference = True
    self_test = False
    corpus = None

    def prepare(self, corpus):
        self.corpus = corpus

    def diagnose(self, bundle):
        if self.corpus is None:
            return claim(None)
        return claim(self.corpus.bundle_cases.get(bundle.bundle_id))


class CacheKeyCheater:
    """Recompute every public case's cache key and compare it with the bundle's folder name and id."""

    name = "cheat-cache-key"
    version = "1"

    def __init__(self):
        from diageval.cases.model import Case
        from diageval.recording.cache import cache_key

        self.keys = {}
        for case_id, entry in LABELS.items():
            case = Case.model_validate(entry["spec"])
            for device in ("cpu", "cuda"):
                self.keys[cache_key(case, device)] = case_id

    def diagnose(self, bundle):
        return claim(self.keys.get(bundle.root.name) or self.keys.get(bundle.bundle_id))


class LookupCheater:
    """Ships the public case files (``LABELS``' specs) and looks its case up from what a bundle shows without
    analysing a trace (issue 44's red team): ``fleet.json``'s run names, the sha256 of a recorded case's trace
    files as ``bundle.json`` lists them, the importer's bundle id (a hash of those), each trace's sha256 once
    decompressed. It claims only a case it matched alone."""

    name = "cheat-lookup"
    version = "1"

    def __init__(self):
        self.by_names: dict[frozenset, set[str]] = {}
        self.by_hash: dict[str, set[str]] = {}
        for case_id, entry in LABELS.items():
            spec = entry["spec"]
            runs = (spec.get("fleet") or {}).get("runs") or []
            if runs:
                self.by_names.setdefault(frozenset(r["name"] for r in runs), set()).add(case_id)
            recorded = [spec["recorded"]] if spec.get("recorded") else [r["recorded"] for r in runs if r.get("recorded")]
            pinned = sorted(f["sha256"] for rec in recorded for f in rec["files"])
            content_id = hashlib.sha256("\n".join(pinned).encode()).hexdigest()[:16]  # the importer's bundle id
            for h in pinned + [content_id]:
                self.by_hash.setdefault(h, set()).add(case_id)

    FAMILY_OPS = {"aten::convolution": "convnet_allreduce", "aten::embedding": "transformer_lm", "aten::addmm": "mlp_ddp"}
    """Workload family by the first of these ops a trace holds (a conv net convolves, a language model embeds)."""

    def live_fingerprint(self, root: Path) -> str | None:
        """Issue 44's fingerprint of a job recorded here: workload family (its op names), world size, device and
        step count matched against the public case files, each case's step counts as the
        harness it targets: the declared one where it records as declared (``CHEATER_STEPS=declared``, the harness before
        issue 44's draw), else every count the draw allows a case (``diageval.recording.draw.step_choices``); it claims
        where every matching public case carries one label set."""
        import gzip

        from diageval.cases.model import Case
        from diageval.recording.draw import drawable, step_choices

        manifest = json.loads((root / "bundle.json").read_text())
        steps_file = root / "steps.jsonl"
        traces = sorted(root.glob("rank*/trace.json.gz"))
        if not steps_file.is_file() or not traces:
            return None
        steps = 1 + max(json.loads(line)["step"] for line in steps_file.read_text().splitlines() if line.strip())
        names = {e.get("name") for e in json.loads(gzip.decompress(traces[0].read_bytes()))["traceEvents"]}
        family = next((f for op, f in self.FAMILY_OPS.items() if op in names), None)
        env = manifest["env"]
        live = [(cid, Case.model_validate(e["spec"])) for cid, e in LABELS.items() if e["spec"].get("workload")]
        live = [(cid, c) for cid, c in live if drawable(c) and c.workload.name == family and c.world_size == env["world_size"]
                and (c.requires.device == "cuda") == (env["device"] == "cuda")]
        declared = os.environ.get("CHEATER_STEPS") == "declared"  # the harness before the draw records as declared
        matches = [cid for cid, c in live if steps in ([c.workload.steps] if declared else step_choices(c))]
        labels = {json.dumps(sorted(x["category"] for x in LABELS[cid]["causes"])) for cid in matches}
        return matches[0] if len(labels) == 1 and LABELS[matches[0]]["causes"] else None

    def diagnose(self, bundle):
        import gzip

        root = Path(bundle.root)
        found: set[str] = set()
        fleet = root / "fleet.json"
        if fleet.is_file():
            found |= self.by_names.get(frozenset(r["name"] for r in json.loads(fleet.read_text())["runs"]), set())
        manifests = [root / "bundle.json"] + sorted(root.glob("runs/*/bundle.json"))
        for manifest in manifests:
            doc = json.loads(manifest.read_text())
            hashes = [doc.get("bundle_id", "")] + [f["sha256"] for f in doc.get("files", [])]
            for h in hashes:
                found |= self.by_hash.get(h, set())
            for f in doc.get("files", []):
                if f["path"].endswith("trace.json.gz") and not found:
                    try:
                        found |= self.by_hash.get(hashlib.sha256(gzip.decompress((manifest.parent / f["path"]).read_bytes())).hexdigest(), set())
                    except (OSError, EOFError):
                        pass
        return claim(one(found))


class FingerprintCheater(LookupCheater):
    """The lookup by what a live job's bundle shows of its kind (:meth:`LookupCheater.live_fingerprint`)."""

    name = "cheat-fingerprint"

    def diagnose(self, bundle):
        return claim(self.live_fingerprint(Path(bundle.root)))


class FolderCheater:
    """A cache copied beside its module or into any folder on its ``sys.path`` (a ``PYTHONPATH`` entry)."""

    name = "cheat-folder"
    version = "1"

    def diagnose(self, bundle):
        roots = [HERE, HERE / "cache"] + [Path(p) for p in sys.path if p and not p.startswith(("/usr", sys.prefix))]
        return claim(case_from_caches(roots, bundle.root))


class ProcCheater:
    """The routes that need no program of their own, from inside the worker: /proc, walking up, history."""

    name = "cheat-proc"
    version = "1"

    def diagnose(self, bundle):
        out = Path.cwd() / "output.json"
        for route in (route_proc, route_walk_up, route_history, route_run_folder, route_out_path):
            found = route(bundle.root, out)
            if found:
                return claim(found)
        return claim(None)


class MemoryCheater:
    """Keeps what it saw from case to case, every way an in-process diagnoser can: in its own memory, in files
    under ``/tmp`` and ``/dev/shm``, and in a daemon it leaves running (an abstract unix socket). With a memory,
    a noise bundle is paired with its base recording and a fleet's member runs with the same runs in another
    fleet (issue 44). It claims nothing: its abstention says how many earlier bundles each memory held."""

    name = "cheat-memory"
    version = "1"
    SEEN: list[str] = []

    def _socket_name(self) -> bytes:
        return f"\0{os.environ.get('CHEATER_MARKER', 'cheater')}-memory".encode()

    def _daemon(self, fingerprint: str) -> int:
        import socket

        def ask() -> int:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(5)
                s.connect(self._socket_name())
                s.sendall(fingerprint.encode() + b"\n")
                return int(s.recv(64) or b"0")

        try:
            return ask()
        except OSError:
            pass
        if os.fork() == 0:  # the daemon: counts what it is told, for 120 s at most
            os.setsid()
            seen: list[str] = []
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
                server.bind(self._socket_name())
                server.listen(8)
                server.settimeout(120)
                try:
                    while True:
                        conn, _ = server.accept()
                        with conn:
                            got = conn.recv(256).decode().strip()
                            conn.sendall(str(sum(1 for f in seen if f != got)).encode())
                            seen.append(got)
                except OSError:
                    pass
            os._exit(0)
        for _ in range(50):
            time.sleep(0.05)
            try:
                return ask()
            except OSError:
                continue
        return -1

    def diagnose(self, bundle):
        fingerprint = hashlib.sha256((bundle.root / "bundle.json").read_bytes()).hexdigest()
        memory = sum(1 for f in self.SEEN if f != fingerprint)
        self.SEEN.append(fingerprint)
        counts = {"memory": memory}
        for where in ("/tmp", "/dev/shm"):
            log = Path(where) / f".{os.environ.get('CHEATER_MARKER', 'cheater')}-seen"
            earlier = log.read_text().split() if log.is_file() else []
            counts[where] = sum(1 for f in earlier if f != fingerprint)
            with open(log, "a") as f:
                f.write(fingerprint + "\n")
        counts["daemon"] = self._daemon(fingerprint)
        return {"abstain": {"reason": "remembered " + " ".join(f"{k}={v}" for k, v in counts.items())}}


if __name__ == "__main__":
    main()
