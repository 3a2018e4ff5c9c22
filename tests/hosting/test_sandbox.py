"""The box a diagnoser runs in, and the private bundle copy it gets (issue 8: sandbox and integrity)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from run_fakes import write_bundle

from diageval.fileio import owned_temp_dir, remove_stale_temp_dirs
from diageval.hosting.box_policy import HiddenRoots
from diageval.hosting.case_box import close_case, open_case, read_output
from diageval.hosting.private_bundle import BundleIntegrityError, private_copy, remove_copy
from diageval.hosting.sandbox import BOX_IN, Box, SandboxPolicy, probe, readable_paths, scrubbed_env
from diageval.hosting.spec_paths import SpecPathError, spec_paths

needs_bwrap = pytest.mark.skipif(probe() is not None, reason=f"no sandbox here: {probe()}")


def _run_in_box(box: Box, script: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = box.spawn([sys.executable, "-c", script], cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@needs_bwrap
def test_a_box_shows_python_and_its_folders_and_hides_the_roots(tmp_path):
    secret = tmp_path / "secret"
    (secret / "cases").mkdir(parents=True)
    (secret / "cases" / "labels.yaml").write_text("labels: yes\n")
    box = Box(SandboxPolicy(hidden=(secret,)))
    try:
        (box.host_in / "b").mkdir()
        (box.host_in / "b" / "f.txt").write_text("evidence")
        (box.host_out / "c").mkdir()
        script = (
            "import os, json, sys\n"
            f"print(json.dumps({{'secret': os.path.exists({str(secret)!r}), 'tmp': os.listdir('/tmp'),"
            "'cwd': os.getcwd(), 'evidence': open('/box/in/b/f.txt').read(), 'pid': os.getpid(),"
            "'procs': sorted(p for p in os.listdir('/proc') if p.isdigit()), 'env': sorted(os.environ)}))\n"
            "try:\n    open('/box/in/b/f.txt', 'w')\nexcept OSError as e:\n    print('ro', e.errno)\n"
            "open('out.json', 'w').write('{}')\n"
        )
        r = _run_in_box(box, script, box.host_out / "c")
        assert r.returncode == 0, r.stderr
        seen = json.loads(r.stdout.splitlines()[0])
        assert seen["secret"] is False
        assert not [n for n in seen["tmp"] if n.startswith("diageval-box-")]  # /tmp shows only what sys.path names
        assert seen["cwd"] == "/box/out/c" and seen["evidence"] == "evidence"
        assert len(seen["procs"]) <= 3  # bwrap's init, python (and nothing of the host)
        assert r.stdout.splitlines()[1].startswith("ro ")
        assert (box.host_out / "c" / "out.json").read_text() == "{}"
        assert not any(k.startswith("DIAGEVAL_") for k in seen["env"])
    finally:
        box.remove()
    assert not box.host.exists()


@needs_bwrap
def test_a_box_has_no_network_unless_asked(tmp_path):
    script = "import socket\ns = socket.socket()\ntry:\n    s.connect(('10.255.255.1', 9))\nexcept OSError as e:\n    print(e.errno)\n"
    box = Box(SandboxPolicy(hidden=()))
    try:
        r = _run_in_box(box, script, box.host_out)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(__import__("errno").ENETUNREACH)
    finally:
        box.remove()


def test_python_folders_inside_a_hidden_root_are_left_out_unless_they_hold_python(tmp_path, monkeypatch):
    hidden = tmp_path / "checkout"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "harness").mkdir()
    monkeypatch.setattr(sys, "path", sys.path + [str(hidden / "tests"), str(hidden), str(tmp_path)])
    paths = readable_paths(SandboxPolicy(hidden=(hidden,), visible=(hidden / "harness",)))
    assert hidden / "harness" in paths
    assert not any(p == hidden or hidden / "tests" == p or p == tmp_path for p in paths)


def test_the_environment_loses_diageval_variables_and_hidden_paths(tmp_path):
    hidden = tmp_path / "home"
    env = scrubbed_env(
        {"DIAGEVAL_HOME": "x", "LANG": str(hidden / "bundles"), "PATH": f"/usr/bin:{hidden}/bin", "LC_ALL": "C.UTF-8",
         "PWD": "/w"},
        SandboxPolicy(hidden=(hidden,)), home=Path("/box/out/c"),
    )
    assert env["PATH"] == "/usr/bin" and env["LC_ALL"] == "C.UTF-8" and env["HOME"] == env["PWD"] == "/box/out/c"
    assert "DIAGEVAL_HOME" not in env and "LANG" not in env


SECRETS = {"GITHUB_TOKEN": "ghp_x", "AWS_SECRET_ACCESS_KEY": "aws", "OPENAI_API_KEY": "sk-x", "MY_TOOL_HOME": "/opt/t",
           "LLM_DIAGNOSER_API_KEY": "k", "HTTPS_PROXY": "http://proxy:3128"}


def test_the_environment_is_an_allowlist_secrets_pass_only_when_named():
    from diageval.hosting import HostPolicy

    env = scrubbed_env({**SECRETS, "PATH": "/usr/bin"}, SandboxPolicy(hidden=()))
    assert set(env) == {"PATH", "HOME", "PWD", "TMPDIR"}
    named = scrubbed_env(SECRETS, SandboxPolicy(hidden=(), host=HostPolicy(pass_env=("MY_TOOL_HOME",))))
    assert named["MY_TOOL_HOME"] == "/opt/t" and "GITHUB_TOKEN" not in named
    networked = scrubbed_env(SECRETS, SandboxPolicy(hidden=(), host=HostPolicy(allow_network=True)))
    assert networked["LLM_DIAGNOSER_API_KEY"] == "k" and networked["HTTPS_PROXY"] == "http://proxy:3128"  # the adapter's own
    assert not {"GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY"} & set(networked)
    with pytest.raises(ValueError, match="DIAGEVAL_"):
        HostPolicy(pass_env=("DIAGEVAL_HOME",))


def test_stale_temp_folders_of_dead_owners_are_removed(tmp_path):
    mine = owned_temp_dir(tmp_path, "x-")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"x-{dead.pid}-abc"
    stale.mkdir()
    assert remove_stale_temp_dirs(tmp_path, "x-") == [stale]
    assert mine.exists() and not stale.exists()


# --- the private copy ------------------------------------------------------------------------------


def test_the_private_copy_has_a_new_id_read_only_files_and_only_listed_files(tmp_path):
    src = write_bundle(tmp_path / "cache" / "0123abcd", "original-id")
    (src / "planted.txt").write_text("not in bundle.json")
    dest = private_copy(src, tmp_path / "copy", "random-id")
    manifest = json.loads((dest / "bundle.json").read_text())
    assert manifest["bundle_id"] == "random-id"
    assert not (dest / "planted.txt").exists()
    assert (dest / "rank0" / "trace.json.gz").read_bytes() == (src / "rank0" / "trace.json.gz").read_bytes()
    assert not os.access(dest / "steps.jsonl", os.W_OK) or os.geteuid() == 0
    assert oct((dest / "steps.jsonl").stat().st_mode & 0o777) == "0o444"
    remove_copy(dest)
    assert not dest.exists()


def test_a_changed_file_is_named_and_nothing_is_copied(tmp_path):
    src = write_bundle(tmp_path / "b", "id")
    with open(src / "steps.jsonl", "a") as fh:
        fh.write('{"rank": 0, "step": 9, "t_start": 0, "t_end": 1}\n')
    with pytest.raises(BundleIntegrityError, match=r"steps\.jsonl: size or sha256 differs"):
        private_copy(src, tmp_path / "copy", "x")
    assert not (tmp_path / "copy").exists()


def test_a_symlink_in_a_bundle_is_refused(tmp_path):
    src = write_bundle(tmp_path / "b", "id")
    outside = tmp_path / "labels.txt"
    outside.write_text("the answer")
    (src / "logs" / "rank0.log").unlink()
    (src / "logs" / "rank0.log").symlink_to(outside)
    with pytest.raises(BundleIntegrityError, match=r"logs/rank0\.log is a symlink"):
        private_copy(src, tmp_path / "copy", "x")


def test_output_links_and_fifos_are_not_followed_back(tmp_path):
    src = write_bundle(tmp_path / "b", "id")
    box = Box(None)
    try:
        folders = open_case(box, src, "id")
        secret = tmp_path / "secret.txt"
        secret.write_text("host file")
        (folders.out_host / "stdout.txt").symlink_to(secret)
        os.mkfifo(folders.out_host / "output.json")
        diagnosis, why = read_output(folders, "{out}")
        assert diagnosis is None and "not a plain file" in why
        close_case(folders, tmp_path / "case")
        assert not (tmp_path / "case" / "stdout.txt").exists()
        assert not folders.bundle_host.exists() and not folders.out_host.exists()
    finally:
        box.remove()


def test_box_paths_inside_and_out(tmp_path):
    box = Box(SandboxPolicy(hidden=()))
    try:
        assert box.inner(box.host_in / "abc") == BOX_IN / "abc"
        with pytest.raises(ValueError):
            box.inner(tmp_path)
    finally:
        box.remove()


# --- what a spec may see ---------------------------------------------------------------------------


def test_spec_paths_show_a_program_outside_and_refuse_one_in_the_cases(tmp_path):
    checkout, cases, elsewhere = tmp_path / "checkout", tmp_path / "cases", tmp_path / "tools"
    for d in (checkout / "tests", cases, elsewhere):
        d.mkdir(parents=True)
    (elsewhere / "diag.py").write_text("")
    (checkout / "tests" / "fake.py").write_text("")
    (cases / "cheat.py").write_text("")
    roots = HiddenRoots(checkout=checkout, secret=(cases,))
    got = spec_paths("cmd:python tools/diag.py {bundle} {out}", roots, cwd=tmp_path)
    assert got.visible == (elsewhere / "diag.py",) and str(elsewhere / "diag.py") in got.spec  # the file, not tools/
    got = spec_paths(f"cmd:python {checkout}/tests/fake.py {{bundle}}", roots, cwd=tmp_path)
    assert got.visible == (checkout / "tests" / "fake.py",)  # the named file only, not tests/
    with pytest.raises(SpecPathError, match="cheat.py"):
        spec_paths(f"cmd:python {cases}/cheat.py {{bundle}}", roots, cwd=tmp_path)
    with pytest.raises(SpecPathError):
        spec_paths(f"cmd:cat {cases}", roots, cwd=tmp_path)


def test_spec_paths_of_a_module_in_the_checkout_are_refused(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    (checkout / "mypkg").mkdir(parents=True)
    (checkout / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "mydiag.py").write_text("")
    monkeypatch.syspath_prepend(str(checkout))
    monkeypatch.syspath_prepend(str(tmp_path / "mine"))
    roots = HiddenRoots(checkout=checkout, secret=())
    with pytest.raises(SpecPathError, match="mypkg"):
        spec_paths("mypkg.sub:Diag", roots)
    got = spec_paths("mydiag:Diag", roots)
    assert got.visible == (tmp_path / "mine" / "mydiag.py",) and got.python_path == (str(tmp_path / "mine"),)


def test_spec_paths_bind_only_what_is_named_and_refuse_label_stores_and_the_harness_log(tmp_path, monkeypatch):
    """Issue 25's folder-binding and progress-log routes: a script's folder is never bound (a copied cache
    beside it stays out), a named folder holding a label store or a run folder is refused, /proc and /dev
    words are the box's own, and the file the harness logs to is refused wherever it is named."""
    roots = HiddenRoots(checkout=None, secret=())
    tools = tmp_path / "tools"
    (tools / "cache" / "evidence" / "k1").mkdir(parents=True)
    (tools / "cache" / "k1.truth.json").write_text('{"case_id": "straggler-rank1"}')
    (tools / "cheat.py").write_text("")
    got = spec_paths(f"cmd:python {tools / 'cheat.py'} {{bundle}} {{out}}", roots)
    assert got.visible == (tools / "cheat.py",)
    with pytest.raises(SpecPathError, match="truth file"):
        spec_paths(f"cmd:python {tools / 'cheat.py'} {tools} {{bundle}}", roots)
    runs = tmp_path / "old-runs" / "r1"
    runs.mkdir(parents=True)
    (runs / "run.json").write_text("{}")
    (runs / "results.jsonl").write_text("")
    with pytest.raises(SpecPathError, match="run folder"):
        spec_paths(f"cmd:ls {tmp_path / 'old-runs'}", roots)
    cases = tmp_path / "mycases"
    cases.mkdir()
    (cases / "a.yaml").write_text("id: a\nlabels:\n  causes: []\n")
    with pytest.raises(SpecPathError, match="labeled case"):
        spec_paths(f"cmd:ls {cases}", roots)
    got = spec_paths("cmd:python -c pass /proc/self/fd/2 /dev/stderr /proc/1/root {bundle}", roots)
    assert got.visible == ()
    log = tmp_path / "logs" / "run.log"
    log.parent.mkdir()
    log.write_text("")
    with open(log, "a") as fh:
        saved = os.dup(2)
        os.dup2(fh.fileno(), 2)
        try:
            with pytest.raises(SpecPathError, match="writes its output"):
                spec_paths(f"cmd:cat {log}", roots)
            with pytest.raises(SpecPathError, match="writes its output"):
                spec_paths(f"cmd:ls {log.parent}", roots)
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def test_pythonpath_folders_are_not_bound_whole(tmp_path, monkeypatch):
    """A PYTHONPATH entry (here: any sys.path folder outside the Python installation) can hold anything:
    it is not bound; a diagnoser's own module is bound by itself."""
    stash = tmp_path / "stash"
    stash.mkdir()
    (stash / "x.truth.json").write_text("{}")
    monkeypatch.syspath_prepend(str(stash))
    paths = readable_paths(SandboxPolicy(hidden=()))
    assert not any(p == stash or stash in p.parents or p in stash.parents for p in paths)


@needs_bwrap
def test_a_hidden_root_inside_a_bound_folder_is_masked(tmp_path):
    """A wheel ships the labeled corpus inside site-packages, which the box binds: it is covered."""
    from diageval.hosting.sandbox import masked_paths, wrap

    site = tmp_path / "site"
    (site / "corpus").mkdir(parents=True)
    (site / "corpus" / "labels.yaml").write_text("causes: [compute.straggler_rank]\n")
    policy = SandboxPolicy(hidden=(site / "corpus",))
    assert masked_paths(policy, [site]) == [site / "corpus"]
    box = Box(policy)
    try:
        argv = wrap(["/bin/sh", "-c", f"ls -A {site}/corpus | wc -l"], box, policy)
        i = argv.index("--")
        argv[i:i] = ["--ro-bind", str(site), str(site), "--tmpfs", str(site / "corpus")]  # what wrap does for Python
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr
    finally:
        box.remove()


def test_only_prior_and_oracle_get_labels_and_only_by_the_harness_s_table():
    from importlib.metadata import EntryPoint

    from diageval.hosting.handover import BUILTIN_ROLES, NO_ROLE, builtin_role
    from diageval.hosting.registry import diagnoser_entry_points

    registered = diagnoser_entry_points()
    labeled = {name for name in registered if builtin_role(name, registered[name]).handover == "corpus"}
    assert labeled == {"prior", "oracle"}
    assert {n for n in registered if builtin_role(n, registered[n]).self_test} == {"oracle"}
    assert builtin_role("cheaters:ReferenceCheater", []) is NO_ROLE  # an import string: no role, whatever it says
    # a plugin's entry point called "oracle", or the built-in's name pointing elsewhere: no role either
    impostor = EntryPoint("oracle", "cheaters:ReferenceCheater", "diageval.diagnosers")
    assert builtin_role("oracle", [impostor]) is NO_ROLE
    assert builtin_role("oracle", [*registered["oracle"], impostor]) is NO_ROLE
    assert set(BUILTIN_ROLES) <= set(registered)


@needs_bwrap
def test_a_run_box_shows_the_runs_taxonomy_and_no_case(tmp_path):
    """The taxonomy is the public contract (`load_taxonomy()` must work in the box: `llm` builds its prompt
    from it); the labeled cases beside it stay hidden. With `--cases DIR` the box's taxonomy is DIR's."""
    from diageval.paths import builtin_cases_dir
    from diageval.hosting.box_policy import run_policy, run_roots

    own = tmp_path / "my-cases"
    (own / "x").mkdir(parents=True)
    text = (builtin_cases_dir() / "taxonomy.yaml").read_text().replace('version: "', 'version: "9', 1)
    (own / "taxonomy.yaml").write_text(text)
    (own / "x" / "case.yaml").write_text("id: secret-case\n")
    script = (
        "import os, json\nfrom diageval.paths import builtin_cases_dir\n"
        "from diageval.cases.taxonomy import load_taxonomy\n"
        f"print(json.dumps({{'listed': sorted(os.listdir(builtin_cases_dir())), 'version': load_taxonomy().version,"
        f"'own': os.path.exists({str(own)!r})}}))\n"
    )
    for cases_dir, version in ((None, load_taxonomy_version(builtin_cases_dir())), (own, "9" + load_taxonomy_version(builtin_cases_dir()))):
        box = Box(run_policy(run_roots(runs_dir=tmp_path / "runs", cases_dir=cases_dir)))
        try:
            (box.host_out / "c").mkdir()
            r = _run_in_box(box, script, box.host_out / "c")
        finally:
            box.remove()
        assert r.returncode == 0, r.stderr
        seen = json.loads(r.stdout)
        assert seen == {"listed": ["__init__.py", "taxonomy.yaml"], "version": version, "own": False}


def load_taxonomy_version(cases_dir: Path) -> str:
    from diageval.cases.taxonomy import load_taxonomy

    return load_taxonomy(cases_dir / "taxonomy.yaml").version


def test_a_venv_inside_the_checkout_stays_on_the_box_s_path(tmp_path, monkeypatch):
    """CI and a newcomer make their venv inside the checkout (a hidden root): its bin folder stays on PATH
    (the box binds it as the running Python), so `cmd:python ...` runs the venv's Python."""
    checkout = tmp_path / "checkout"
    venv = checkout / ".venv"
    (venv / "bin").mkdir(parents=True)
    monkeypatch.setattr(sys, "prefix", str(venv))
    env = scrubbed_env({"PATH": f"{venv}/bin:{checkout}/tools:/usr/bin", "LANG": f"{checkout}/x"},
                       SandboxPolicy(hidden=(checkout,)))
    assert env["PATH"] == f"{venv}/bin:/usr/bin" and "LANG" not in env


class _NoExec:
    """An os.statvfs result with the noexec flag set."""

    def __init__(self, st):
        self._st = st
        self.f_flag = st.f_flag | os.ST_NOEXEC

    def __getattr__(self, name):
        return getattr(self._st, name)


def test_boxes_are_made_in_ram_only_where_there_is_room_and_the_user_did_not_say_otherwise(tmp_path, monkeypatch):
    """A box's host folder goes to a roomy /dev/shm (file creation there is ~20x cheaper than on disk), to the
    system's temp folder when that tmpfs is small (a container's 64 MiB) or missing, and to $TMPDIR when it is set."""
    import tempfile

    from diageval.hosting import sandbox

    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.setattr(sandbox, "SHM_DIR", shm)
    monkeypatch.setattr(sandbox, "SHM_MIN_FREE", 1)
    assert sandbox.box_parent() == shm
    monkeypatch.setattr(sandbox, "SHM_MIN_FREE", 1 << 62)  # more than any disk holds
    assert sandbox.box_parent() == Path(tempfile.gettempdir())
    monkeypatch.setattr(sandbox, "SHM_DIR", tmp_path / "absent")
    assert sandbox.box_parent() == Path(tempfile.gettempdir())
    monkeypatch.setattr(sandbox, "SHM_DIR", shm)
    monkeypatch.setattr(sandbox, "SHM_MIN_FREE", 1)
    real_statvfs = os.statvfs
    monkeypatch.setattr(sandbox.os, "statvfs", lambda p: _NoExec(real_statvfs(p)))
    assert sandbox.box_parent() == Path(tempfile.gettempdir())  # noexec: a diagnoser's own script could not run there
    monkeypatch.setattr(sandbox.os, "statvfs", real_statvfs)
    monkeypatch.setattr(sandbox, "SHM_DIR", shm)
    monkeypatch.setattr(sandbox, "SHM_MIN_FREE", 1)
    mine = tmp_path / "mine"
    mine.mkdir()
    monkeypatch.setenv("TMPDIR", str(mine))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() caches its answer
    assert sandbox.box_parent() == mine
    box = Box(None)
    try:
        assert box.host.parent == mine
    finally:
        box.remove()
