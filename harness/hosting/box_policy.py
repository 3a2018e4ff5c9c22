"""What a run's boxes hide and show: the roots kept from every diagnoser (the checkout, the bundle cache,
the run folders, the cases) and the few public things shown inside them (the package's source folders,
a diagnoser's own module, the run's taxonomy). :mod:`diageval.hosting.sandbox` builds the box from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from diageval.hosting.label_stores import refusal
from diageval.hosting.policy import HostPolicy
from diageval.hosting.sandbox import SandboxPolicy, hidden_roots, is_within, real_path, visible_sources


def package_source_dirs() -> tuple[Path, ...]:
    """The folders the ``diageval`` package imports from (an editable install points into the checkout),
    located without importing them."""
    from importlib.util import find_spec

    found = [find_spec(name) for name in ("diageval", "diageval.diagnosers", "diageval.scoring", "diageval.reports")]
    return visible_sources(Path(loc) for spec in found if spec is not None
                           for loc in (spec.submodule_search_locations or []))


@dataclass(frozen=True)
class HiddenRoots:
    """The roots a run hides. ``secret`` ones (the cache, the runs, the cases) show nothing inside, ever;
    inside the ``checkout`` only the package's source folders and single files a diagnoser spec names
    (its program or script) are shown."""

    checkout: Path | None
    secret: tuple[Path, ...]
    taxonomy: Path | None = None  # the run's taxonomy: public, the one file under a hidden root a diagnoser reads

    @property
    def all(self) -> tuple[Path, ...]:
        return hidden_roots(self.checkout, *self.secret)

    def may_show(self, path: Path) -> tuple[Path | None, str | None]:
        """(what to bind so that ``path``, a file or folder a diagnoser spec names, is visible, None) or
        (None, why not). Only the path itself is ever bound, never its folder: a folder beside a script
        can hold anything. Refused: anything in or around the secret roots; a folder in or around the
        checkout; anything :func:`~diageval.hosting.label_stores.refusal` finds a label store or the
        harness's own log in."""
        p = real_path(Path(path))
        if any(is_within(p, h) or is_within(h, p) for h in self.secret):
            return None, f"{path} is inside (or holds) the bundle cache, the runs or the cases"
        if self.checkout is not None and (is_within(self.checkout, p) or is_within(p, self.checkout)):
            if not p.is_file() or p == self.checkout:
                return None, f"{path} is a folder in (or around) the checkout, which holds the labels"
        why = refusal(p)
        return (None, why) if why else (p, None)


def run_roots(*, runs_dir: Path | None, cases_dir: Path | None) -> HiddenRoots:
    """The checkout (when the package runs from one), ``$DIAGEVAL_HOME``, the run folders, the cases and
    the corpus shipped with the package (in a checkout, its ``cases/``; in a wheel, inside site-packages)."""
    from diageval.paths import SOURCE_ROOT, builtin_cases_dir, default_taxonomy_path, home_dir

    checkout = SOURCE_ROOT if (SOURCE_ROOT / "pyproject.toml").is_file() or (SOURCE_ROOT / "cases").is_dir() else None
    secret = hidden_roots(home_dir(), runs_dir, cases_dir, builtin_cases_dir())
    taxonomy = default_taxonomy_path(cases_dir)
    return HiddenRoots(checkout=real_path(checkout) if checkout else None, secret=secret,
                       taxonomy=real_path(taxonomy) if taxonomy.is_file() else None)


def run_policy(roots: HiddenRoots, host: HostPolicy | None = None, *, visible: Iterable[Path] = ()) -> SandboxPolicy:
    """The policy of a run: hide ``roots``; show the package's source folders and ``visible`` read-only, and
    the run's taxonomy where a diagnoser looks for it (:func:`taxonomy_files`); network, environment and
    limits as ``host`` says."""
    return SandboxPolicy(hidden=roots.all, visible=package_source_dirs() + tuple(visible), host=host or HostPolicy(),
                         shown_files=taxonomy_files(roots.taxonomy))


def taxonomy_files(taxonomy: Path | None) -> tuple[tuple[Path, Path], ...]:
    """(host file, path in the box) that make ``diageval.cases.taxonomy.load_taxonomy()`` work in a box.

    The taxonomy is the public contract every diagnoser may read (categories, definitions, the evidence
    that tells each apart); it lives beside the labeled cases, which stay hidden. The box shows the
    built-in corpus package with two files only: its ``__init__.py`` (so that ``importlib.resources``
    finds the package) and, as its ``taxonomy.yaml``, the run's taxonomy (the ``--cases`` folder's, which
    may differ from the built-in one). No case file is shown.
    """
    from diageval.paths import builtin_cases_dir

    if taxonomy is None:
        return ()
    corpus = real_path(builtin_cases_dir())
    package_marker = corpus / "__init__.py"
    shown = [(package_marker, package_marker)] if package_marker.is_file() else []
    return (*shown, (real_path(taxonomy), corpus / "taxonomy.yaml"))
