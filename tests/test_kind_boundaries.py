"""The extension-point check (issue 39): no kind's name or state literal outside its app and the registry.

The kind registry (:mod:`workloads.registry`) is the only place that knows the kinds: adding one
touches its own app, settings and the URL includes, nothing else. This test reads each registered
kind's *names* from its declaration and fails when one appears in a file the kind does not own.

**What a kind's names are** (:func:`names_of`), for every kind of the project (a kind whose app lives
under ``tests/``, the test-only notebook kind, is a fixture, not part of the product):

- its app's package imported (``import jobs``, ``from jobs.models import …``);
- identifiers: its model's class name (``TrainingRun``) and its state enum's (``RunState``);
- string literals equal to its prefix (``"run"``), its noun (``"run"``) and noun's plural
  (``"runs"``), its app label (``"jobs"``), or starting with its URL namespace (``"jobs:"``);
- string literals equal to a state value **unique to it** (:func:`common_words`): a value no other
  project kind has and no other concept's vocabulary uses (``"scaled_to_zero"``, ``"paused"``). A state word two kinds share (``"queued"``, ``"running"``, ``"failed"``) names no
  kind and is not scanned: the shared machinery reaches those through each kind's
  :class:`~workloads.registry.Lifecycle`, which this check cannot enforce. Nor is a word that is
  also another concept's (``"ready"`` and ``"degraded"`` are a cluster's health, ``"pending"`` an
  invitation's and a delivery's, ``"cancelled"`` a reservation's, ``"succeeded"`` a Kubernetes phase): those are the choices of
  the other apps' model fields, the phase vocabulary of the Django-free cluster layer (a
  Deployment's phases, a cluster's health) and Kubernetes' own words (:data:`KUBERNETES_WORDS`). Likewise
  a Kubernetes resource plural some kind's ``resources`` declare (``"jobs"``, batch/v1's Jobs, which
  the sandbox simulates) is the cluster's word, even where it equals an app label.

- a compound code starting with its noun (``"run_failed"``, ``"endpoint_changed"``): an event kind or
  an audit action, which only the kind's declaration spells (``Announces.events``, ``audit_actions``);
- in a template, its noun or plural in the prose a reader sees (:func:`prose_nouns`: "runs and
  endpoints" on a shared page is out of date once a kind is added; "run" the verb is not the kind).

Otherwise only exact string literals count (Python's :mod:`ast` string constants, quoted strings in
templates); identifiers are matched whole.

**Prose** is checked by what its reader is (issue 48, point 6):

- a Python file's docstrings and comments, read by developers, may use a kind's noun as an example
  ("a run's pods") but may not point into a kind (:func:`prose_code_names`): its model or state-enum
  class (one named by a single English word, ``Workspace``, only where the prose marks it as code), a dotted path into its package (``jobs.manifests``, ``:mod:`inference.status```), its
  package in backticks, its URL namespace. Such a pointer goes stale when the kind moves, and it is
  an upward dependency in words where the code has none — say "the kind's status mapping" instead;
- the ``--help`` of a shared management command (its ``help``, and the ``help``, ``description`` and
  ``epilog`` of its arguments), read by operators, is held to a template's rule: no kind's noun or
  plural (:func:`help_texts`, :func:`prose_nouns`), since "the demo runs and endpoints" is out of date
  once a kind is added. The CLI (``slipway/``) stays out of scope, as above.

**Where it looks** (:func:`scanned_files`): the Python sources (migrations excepted: they are
history and cannot be rewritten) and the templates of every project package — each package of
INSTALLED_APPS that lives in this repository, plus ``cluster`` and ``portal`` — and the structural
tests that must follow the registry (:data:`STRUCTURAL_TESTS`). A kind owns its app's directory
and ``templates/<its app label>/``; :mod:`workloads.registry` names none but may; settings and the
URL includes (:data:`ALLOWED`) are where a kind is added. ``slipway/`` (the
CLI, HTTP only) and the other tests are out of scope: a client and tests exercise kinds by name.

**Known violations** (:data:`TOLERATED`): today's, each with its reason, to shrink to nothing.
A name in a file not listed, or a new name in a listed file, fails the test; a listed one that
disappeared fails it too, so the list cannot go stale.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings

from cluster import deployments as cluster_deployments
from cluster import placement as cluster_placement
from tests.test_import_cycles import REPO
from workloads.models import Workload
from workloads.registry import kinds

#: Tests whose lists of packages or kinds must come from the registry, so a kind touches none of them.
STRUCTURAL_TESTS = ("tests/test_layers.py", "tests/test_import_cycles.py")

#: The touches adding a kind makes besides its app (issue 39): the settings and the URL includes.
ALLOWED = ("portal/settings.py", "portal/urls.py", "portal/api_urls.py")

#: Project packages besides the Django apps of INSTALLED_APPS that the check scans.
EXTRA_PACKAGES = ("cluster", "portal")

#: Packages that exist for one kind alone and belong to it as its app does: the endpoints' data plane, the
#: gateway (issue 47: a process of its own, an app of its own in the layers beside notifications, which only
#: serves endpoints). Not a tolerated violation: nothing shared lives there, and no other kind may use it.
KIND_PACKAGES: dict[str, str] = {"gateway": "inference"}

#: Kubernetes' words that equal a kind's state: a Job's and a PyTorchJob replica's status counts pods that
#: ``succeeded`` (what the sandbox's controllers write), as a pod's phase says ``Succeeded``. A run's phase
#: vocabulary (``jobs.status.TrainingPhase``) spells it so because Kubernetes does, not the other way round.
KUBERNETES_WORDS = frozenset({"succeeded"})

#: ``"path: name"`` found today outside the kind that owns it, with the reason it is still there.
#: Shrink it; never add to it (a new kind's touch belongs behind the registry).
TOLERATED: dict[str, str] = {}


@dataclass(frozen=True)
class KindNames:
    """What names one kind: its owner label (the app's), and what :func:`find` looks for."""

    app_label: str
    app_dir: Path
    packages: frozenset[str]  #: top-level package names whose import names the kind
    identifiers: frozenset[str]
    literals: frozenset[str]  #: exact string literals
    url_namespace: str  #: a literal starting with this names one of its URLs
    nouns: frozenset[str] = frozenset()  #: its noun and plural: what a page's prose may not say
    noun: str = ""  #: a compound code's first part

    @property
    def compound(self) -> re.Pattern:
        """A code made of its noun and a word (``"run_failed"``, ``"endpoint.scaled"``): an event kind or
        an action of its own, which only its declaration may spell (``KindEvent``, ``audit_actions``)."""
        return re.compile(rf"^{re.escape(self.noun)}[_.][a-z][a-z_]*$")


def _state_values(model) -> set[str]:
    return {value for value, _label in model.state_choices()}


def project_kinds() -> list:
    return [kind for kind in kinds() if not Path(kind.model._meta.app_config.path).is_relative_to(REPO / "tests")]


def _phase_words(module) -> set[str]:
    """The string constants of the classes of ``module`` (the cluster layer's phase vocabulary)."""
    return {value for cls in vars(module).values() if isinstance(cls, type) and cls.__module__ == module.__name__
            for name, value in vars(cls).items() if name.isupper() and isinstance(value, str)}


def common_words(kind_labels: set[str]) -> set[str]:
    """Words of concepts other than the kinds: the choices of every field of the other project apps'
    models, the cluster layer's phases and health words, and Kubernetes' own (:data:`KUBERNETES_WORDS`)."""
    words = _phase_words(cluster_deployments) | _phase_words(cluster_placement) | set(KUBERNETES_WORDS)
    words |= {resource.plural for kind in kinds() for resource in kind.resources}
    for model in apps.get_models():
        config = model._meta.app_config
        if config.label in kind_labels or Path(config.path).parent != REPO:
            continue
        for field in model._meta.get_fields():
            for value, _label in getattr(field, "choices", None) or ():
                if isinstance(value, str):
                    words.add(value)
    return words


def names_of(kind, others: list, common: set[str]) -> KindNames:
    """The names of ``kind`` (the module docstring's rule); ``others``: the project's other kinds,
    ``common``: :func:`common_words`."""
    config = kind.model._meta.app_config
    shared = common.union(*(_state_values(other.model) for other in others))
    state_enum = type(kind.lifecycle.queued)
    identifiers = {kind.model.__name__}
    if state_enum is not str:
        identifiers.add(state_enum.__name__)
    literals = ({kind.prefix, kind.noun, kind.plural, config.label} - common) | (_state_values(kind.model) - shared)
    return KindNames(config.label, Path(config.path), frozenset({config.name.split(".")[0]}),
                     frozenset(identifiers), frozenset(literals), f"{config.label}:",
                     frozenset({kind.noun, kind.plural}), kind.noun)


def project_packages() -> list[str]:
    found = [config.name for config in apps.get_app_configs()
             if Path(config.path).parent == REPO and config.name in settings.INSTALLED_APPS]
    return sorted(set(found) | set(EXTRA_PACKAGES))


def scanned_files() -> list[Path]:
    files = [REPO / path for path in STRUCTURAL_TESTS]
    for package in project_packages():
        files += [path for path in (REPO / package).rglob("*.py") if "migrations" not in path.parts]
        files += sorted((REPO / package).rglob("*.html"))
    files += sorted((REPO / "templates").rglob("*.html"))
    return sorted(set(files))


def owner_of(path: Path, names: KindNames) -> bool:
    """Whether ``path`` belongs to the kind (its app, its templates) or to the registry."""
    return (path.is_relative_to(names.app_dir) or path.is_relative_to(REPO / "templates" / names.app_label)
            or any(path.is_relative_to(REPO / package) for package, owner in KIND_PACKAGES.items()
                   if owner == names.app_label)
            or path == REPO / "workloads" / "registry.py" or path in {REPO / allowed for allowed in ALLOWED})


def _python_names(source: str, names: KindNames) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {f"import {alias.name.split('.')[0]}" for alias in node.names
                      if alias.name.split(".")[0] in names.packages}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in names.packages:
                found.add(f"import {node.module.split('.')[0]}")
        elif isinstance(node, ast.Name) and node.id in names.identifiers:
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in names.identifiers:
            found.add(node.attr)
        elif isinstance(node, ast.alias) and node.name in names.identifiers:
            found.add(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= _literal_names(node.value, names)
    return found


def _literal_names(text: str, names: KindNames) -> set[str]:
    """The kind's names a string literal is: one of its literals, one of its URLs, or a compound code."""
    if text in names.literals or names.compound.match(text):
        return {repr(text)}
    if text.startswith(names.url_namespace):
        return {repr(names.url_namespace)}
    return set()


_QUOTED = re.compile(r"""(["'])([^"'\n]*)\1""")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _template_names(source: str, names: KindNames) -> set[str]:
    found = set()
    for _quote, text in _QUOTED.findall(source):
        found |= _literal_names(text, names)
    found |= set(_WORD.findall(source)) & names.identifiers
    found |= {f"prose {word.lower()!r}" for word in prose_nouns(source, names)}
    return found


#: Template comments and tags, code (``make run``) and HTML tags: what a page's reader does not read as prose.
_NOT_PROSE = re.compile(r"\{#.*?#\}|\{% comment %\}.*?\{% endcomment %\}|\{%.*?%\}|\{\{.*?\}\}|<code>.*?</code>|<[^>]*>",
                        re.S)
#: "run" the English verb, not the kind: a command runs as, a budget runs out, while it runs, a pod runs,
#: GPUs run hotter, seconds to run, it does not run, ``make run``.
_VERB_RUN = re.compile(r"(?i)\bruns (?:as|out|at)\b|\b(?:it|shell|machine|workspace|pods?|gpus|to|not|make) runs?\b")


def prose_nouns(source: str, names: KindNames) -> list[str]:
    """The kind's noun or plural in the text a template shows (what is left once comments, template tags and
    HTML tags are gone): a shared page that says "runs and endpoints" is out of date when a kind is added.
    Say what every kind shares ("work", "workloads"), or the registry's words (``kinds_in_words``)."""
    text = _VERB_RUN.sub(" ", _NOT_PROSE.sub(" ", source))
    return re.findall(rf"(?i)\b(?:{'|'.join(sorted(names.nouns))})\b", text)


def developer_prose(source: str) -> str:
    """The docstrings and comments of a Python source, one after the other."""
    found = [token.string for token in tokenize.generate_tokens(io.StringIO(source).readline)
             if token.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append(ast.get_docstring(node, clean=False) or "")
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.append(node.value.value)  # an attribute's docstring (a string statement after it)
    return "\n".join(found)


def prose_code_names(text: str, names: KindNames) -> set[str]:
    """What of a kind's code a developer's prose points at: its classes, a dotted path into its package
    (``jobs.status``, ``jobs.TrainingRun``), its package in backticks, its URL namespace."""
    packages = "|".join(sorted(names.packages))
    found = set()
    for identifier in sorted(names.identifiers):
        # A name of two capitals or more (``TrainingRun``) is code wherever it stands; one that is also an English
        # word (a model ``Workspace``) only where prose marks it as code: in backticks or used as ``X.attribute``.
        marked = r"\b" if sum(c.isupper() for c in identifier) > 1 else r"(?:`[\w.~]*)"
        found |= {f"prose {identifier}" for _ in re.findall(rf"{marked}\b{identifier}\b|\b{identifier}\.\w", text)}
    found |= {f"prose {path}" for path in re.findall(rf"(?<![\w./-])(?:{packages})\.[A-Za-z_]\w*", text)}
    found |= {f"prose {quoted}" for quoted in re.findall(rf"`(?:{packages})`", text)}
    found |= {f"prose {names.url_namespace}" for _ in re.findall(rf"\b{re.escape(names.url_namespace)}[a-z]", text)}
    return found


#: The keywords of an argument whose text ``--help`` prints.
_HELP_KEYWORDS = frozenset({"help", "description", "epilog"})


def help_texts(source: str) -> list[str]:
    """The text a management command's ``--help`` prints: its ``help`` attribute, and the ``help``,
    ``description`` and ``epilog`` of its arguments (each string constant in them)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        argument = isinstance(node, ast.keyword) and node.arg in _HELP_KEYWORDS
        attribute = isinstance(node, ast.Assign) and any(isinstance(target, ast.Name) and target.id == "help"
                                                         for target in node.targets)
        if argument or attribute:
            found += [part.value for part in ast.walk(node.value)
                      if isinstance(part, ast.Constant) and isinstance(part.value, str)]
    return found


def find(path: Path, source: str, names: KindNames) -> set[str]:
    """The names of a kind that ``source`` (the text of ``path``) holds."""
    if path.suffix != ".py":
        return _template_names(source, names)
    found = _python_names(source, names) | prose_code_names(developer_prose(source), names)
    if "management" in path.parts and "commands" in path.parts:
        found |= {f"--help {word.lower()!r}" for text in help_texts(source) for word in prose_nouns(text, names)}
    return found


def violations(files: list[Path], all_names: list[KindNames]) -> set[str]:
    """``"path: name"`` for every kind's name in a scanned file the kind does not own."""
    found = set()
    for path in files:
        source = path.read_text()
        for names in all_names:
            if not owner_of(path, names):
                where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
                found |= {f"{where}: {name}" for name in find(path, source, names)}
    return found


@pytest.fixture(scope="module")
def all_names() -> list[KindNames]:
    project = project_kinds()
    common = common_words({kind.model._meta.app_config.label for kind in project})
    return [names_of(kind, [other for other in project if other is not kind], common) for kind in project]


def test_the_check_knows_every_kind_of_the_project(all_names):
    labels = {names.app_label for names in all_names}
    assert {"jobs", "inference", "workspaces"} <= labels
    assert all(names.literals and names.identifiers for names in all_names)


def test_no_kind_is_named_outside_its_app_and_the_registry(all_names):
    found = violations(scanned_files(), all_names)
    assert sorted(found - set(TOLERATED)) == [], "a kind named outside its app: move it behind the registry"
    assert sorted(set(TOLERATED) - found) == [], "a tolerated violation is gone: strike it from TOLERATED"


def test_it_catches_a_kind_named_in_a_shared_module(all_names, tmp_path):
    """A planted violation of each sort is caught; the kind's own app and prose are not violations."""
    jobs = next(names for names in all_names if names.app_label == "jobs")
    planted = tmp_path / "quotas" / "planted.py"
    planted.parent.mkdir()
    source = ('"""Counts the cancelled runs (prose is not a name)."""\n'
              "from jobs.models import TrainingRun\n"
              "import jobs.constants\n"
              "DONE = 'cancelled'\n"
              "SHARED = 'running'\n"
              "URL = 'jobs:run-list'\n"
              "x = jobs.constants.RunState.PENDING\n")
    planted.write_text(source)
    # "cancelled" is a reservation's state too (reservations.models.ReservationState): it names no kind any more.
    assert find(planted, source, jobs) == {"import jobs", "TrainingRun", "'jobs:'", "RunState"}
    workspaces = next(names for names in all_names if names.app_label == "workspaces")
    assert _python_names("DONE = 'paused'\nSHARED = 'running'\n", workspaces) == {"'paused'"}  # a state only it has
    assert violations([planted], [jobs]) == {f"{planted}: {name}" for name in find(planted, source, jobs)}
    page = '{% if run.state == "cancelled" %}<a href="{% url \'jobs:run-detail\' run.pk %}">Cancelled runs</a>{% endif %}'
    assert _template_names(page, jobs) == {"'jobs:'", "prose 'runs'"}
    # A compound code (an event kind, an action) names the kind as much as its noun does.
    assert _python_names("KIND = 'run_failed'\nOTHER = 'running_total'\n", jobs) == {"'run_failed'"}
    # Prose a page shows names it; comments, tags and "run" the verb do not.
    assert prose_nouns("{# runs #}<p title='run'>It runs as a Job; the budget runs out. A run's GPUs</p>", jobs) == ["run"]
    own = REPO / "jobs" / "views.py"
    assert owner_of(own, jobs) and not owner_of(REPO / "front" / "views.py", jobs)
    assert owner_of(REPO / "templates" / "jobs" / "run_list.html", jobs)
    assert owner_of(REPO / "workloads" / "registry.py", jobs) and owner_of(REPO / "portal" / "urls.py", jobs)
    assert {"run", "runs"} <= jobs.literals and not {"running", "ready", "jobs", "cancelled"} & jobs.literals


def test_it_catches_a_kind_pointed_at_in_prose_and_named_in_help(all_names, tmp_path):
    """Docstrings and comments may say "a run" but not point into the kind; a shared command's ``--help``
    may not say its noun at all."""
    jobs = next(names for names in all_names if names.app_label == "jobs")
    source = ('"""A run\'s pods, mapped as :mod:`jobs.status` does, for a :class:`TrainingRun`."""\n'
              "# the runs' page (jobs:run-list), built by ``jobs`` itself\n"
              "LIMIT = 3\n"
              '"""An attribute\'s docstring pointing at jobs.manifests."""\n'
              "path = 'tests/jobs.py'  # a file named so is not the package\n")
    shared = tmp_path / "quotas" / "planted.py"
    assert find(shared, source, jobs) == {"prose jobs.status", "prose TrainingRun", "prose jobs:",
                                          "prose `jobs`", "prose jobs.manifests"}
    # A model named by an English word is code only where prose marks it so.
    workspaces = next(names for names in all_names if names.app_label == "workspaces")
    assert prose_code_names("Workspace pages come later. See ``Workspace`` and Workspace.objects.", workspaces) == {
        "prose Workspace"}
    assert prose_code_names("Workspace pages come later.", workspaces) == set()
    command = tmp_path / "quotas" / "management" / "commands" / "tidy.py"
    text = ('from django.core.management.base import BaseCommand\n'
            'class Command(BaseCommand):\n'
            '    help = "Tidy the team\'s runs"\n'
            '    def add_arguments(self, parser):\n'
            '        parser.add_argument("--seconds", help="seconds to run; it does not run twice")\n'
            '        parser.add_argument("--keep", help="keep the last run, " + "the newest")\n')
    assert find(command, text, jobs) == {"--help 'runs'", "--help 'run'"}
    assert find(shared, text, jobs) == set()  # not a command: its help is nobody's --help


def test_no_column_is_called_plain_kind():
    """Plain "kind" means a workload kind (docs/glossary.md): a column holding another concept's kind says
    which (``event_kind``, ``alert_kind``, ``resource_kind``), so a reader of a query never has to guess. The
    one Workload table's ``kind`` is the one plain one: it holds a workload kind."""
    plain = sorted(f"{model._meta.label}.{field.name}" for model in apps.get_models()
                   if model._meta.app_config.path.startswith(str(REPO))
                   for field in model._meta.get_fields() if field.name in ("kind", "kinds") and field.concrete
                   and field.model is not Workload)
    assert plain == []
    assert Workload._meta.get_field("kind").max_length >= max(len(kind.prefix) for kind in kinds())
