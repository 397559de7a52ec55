"""``manage.py startkind NAME``: scaffold a new workload kind that passes the suite as generated (issue 48, point 7).

What it writes (docs/architecture.md "Adding a kind"):

- the kind's app ``NAME/``, rendered with Django's own ``startapp`` machinery (:class:`TemplateCommand`) from
  ``workloads/kind_template/app/`` — the test-only kind of tests/workloads/tinykind grown into a product app:
  the model on the abstract ``workloads.models.Workload`` and its state enum, the pure builder
  (``manifests.py``), the status mapping (``status.py``), the ``WorkloadKind`` (``kind.py``) registered from
  ``apps.py``'s ``ready()``, its services, validation and API (create with its dry run, read, delete: a viewset
  on ``workloads.api.WorkloadViewSet``), its list page and its page (which the shared read views link), the
  read views every kind gets, its state cell and admin list — and its initial migration, made by
  ``makemigrations`` itself in a fresh process (the one way to get exactly what ``makemigrations --check``
  expects, whatever the abstract model holds by then);
- its tests, ``tests/NAME/`` from ``workloads/kind_template/tests/``: submit → admitted → running → ended on the
  fake cluster, its API and its pages;
- its module of the command line, ``slipway/NAME.py`` (the ``NOUN`` group, also ``PLURAL``: create with its dry
  run, ls, describe, delete, on the client's methods for any kind's collection) added to the root group in
  ``slipway/cli.py``, and its test ``tests/cli/test_NAME.py`` — written, since slipway/ imports no project
  package and so cannot follow the registry;
- the wiring, edited in place rather than printed: the app in ``INSTALLED_APPS`` (after the last kind, the
  layer order), its URLs in ``portal/urls.py`` and its viewset in ``portal/api_urls.py`` (each after the last
  kind's), as the generators that promise a working result (Rails') do and ``startapp`` (which promises only
  files) does not — the issue's proof is that the output passes the suite as generated, and a kind not
  installed is checked by nothing. The new files' imports are sorted by the project's linter;
- its column of docs/glossary.md's table of states (tests/docs/test_glossary_states.py holds the table to the
  registry), and deploy/rbac.yaml rendered again (``manage.py rbac``) with its resource kind.

What it derives rather than writes: its layer (tests/test_layers.py), its names for the boundary check
(tests/test_kind_boundaries.py), its page, read routes, API routes, create and list page in the isolation matrix
(tests/test_isolation_matrix.py) and its part of the API fuzz (tests/api/test_fuzz.py) come from the registry
and the router. What it prints, for later: a sandbox controller for its object, rows for routes of its own that
change it, and the reason-code migration.

Every refusal is a :class:`CommandError` before anything is written: a name that is no lowercase identifier
or is an importable module already, a directory that exists, a prefix, noun, plural, app label or model name
another kind or app uses.
"""

from __future__ import annotations

import ast
import keyword
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.core.management.base import CommandError
from django.core.management.templates import TemplateCommand

from workloads.registry import Pages, kinds

TEMPLATES = Path(__file__).resolve().parents[2] / "kind_template"
#: What the app, the URL namespace and the state enum's members are spelled with.
IDENTIFIER = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
PREFIX = re.compile(r"^[a-z]+$")
#: The glossary's table of states, and the generated kind's row cells (its states as the template declares them).
GLOSSARY = Path("docs") / "glossary.md"
GLOSSARY_HEADER = "| word | means | in the code |"
GLOSSARY_CELLS = {"**queued**": "`queued`", "**holding**": "`admitted`, `starting`, `running`",
                  "**active**": "the four above", "**unfinished**": "as active"}


def derive(name: str, noun: str | None, plural: str | None, prefix: str | None) -> dict[str, str]:
    """The new kind's names from ``NAME`` (its app package, a plural) and the options: the noun is ``NAME`` without
    its final "s", the plural ``NAME``, the prefix the noun's letters, the model the noun in CamelCase. A ``NAME``
    without a final "s" is its noun, and its plural gets one. (No example names a kind here: the boundary check
    reads a shared module's prose, and the example would be a kind's name the day someone makes it.)"""
    noun = noun or (name[:-1] if name.endswith("s") and len(name) > 1 else name)
    plural = plural or (name if name != noun else f"{noun}s")
    prefix = prefix or noun.replace("_", "")
    model = "".join(part.capitalize() for part in noun.split("_"))
    return {"noun": noun, "plural": plural, "prefix": prefix, "model_name": model, "state_enum": f"{model}State",
            "kind_class": f"{model}Kind", "plural_override": "yes" if plural != f"{noun}s" else ""}


def refusals(repo: Path, name: str, names: dict[str, str]) -> list[str]:
    """Why ``name`` and its names cannot be a new kind here, in words ([] when they can)."""
    found = []
    if not IDENTIFIER.match(name) or keyword.iskeyword(name):
        found.append(f"{name!r} is not a lowercase Python identifier (an app package and URL namespace)")
    elif find_spec(name) is not None:
        found.append(f"{name!r} is the name of a module that exists already")
    for what in ("noun", "plural"):
        if not IDENTIFIER.match(names[what]) or keyword.iskeyword(names[what]):
            found.append(f"the {what} {names[what]!r} is not a lowercase identifier")
    if not PREFIX.match(names["prefix"]):
        found.append(f"the prefix {names['prefix']!r} is not lowercase letters only (refs read prefix:42)")
    if names["plural"] == names["noun"]:
        found.append(f"the plural {names['plural']!r} is the noun (the command's group answers to both)")
    for directory in (repo / name, repo / "tests" / name, repo / "slipway" / f"{name}.py",
                      repo / "tests" / "cli" / f"test_{name}.py"):
        if directory.exists():
            found.append(f"{directory} exists already")
    cli = repo / "slipway" / "cli.py"
    bound = {alias.asname or alias.name for node in ast.walk(ast.parse(cli.read_text())) if isinstance(node, ast.ImportFrom)
             for alias in node.names} if cli.exists() else set()
    for what in ("noun", "plural"):
        if names[what] in bound:
            found.append(f"the {what} {names[what]!r} is a command of slipway/cli.py already")
    if name in {config.label for config in apps.get_app_configs()}:
        found.append(f"an installed app is labelled {name!r}")
    for kind in kinds():
        taken = {"prefix": kind.prefix, "noun": kind.noun, "plural": kind.plural, "model_name": kind.model.__name__}
        for what, value in taken.items():
            if names[what] == value or (what in ("noun", "plural") and names[what] in (kind.noun, kind.plural)):
                found.append(f"the {what.replace('_', ' ')} {names[what]!r} is {type(kind).__name__}'s")
    return sorted(set(found))


def project_kind_packages() -> list[str]:
    """The app packages of the product's kinds, in registration order (a kind under tests/ is a fixture)."""
    packages = [kind.model._meta.app_config.name for kind in kinds()]
    return [package for package in packages if not package.startswith("tests.")]


def insert_after_last(path: Path, lines_of: callable, line: str) -> None:
    """Insert ``line`` after the last line of the last node ``lines_of(tree)`` returns, at that node's indent."""
    source = path.read_text()
    nodes = lines_of(ast.parse(source))
    if not nodes:
        raise CommandError(f"{path}: found no kind's line to add the new one after; add {line.strip()!r} by hand")
    last = max(nodes, key=lambda node: node.end_lineno)
    lines = source.splitlines(keepends=True)
    lines.insert(last.end_lineno, " " * last.col_offset + line + "\n")
    path.write_text("".join(lines))


def installed_kind_entries(packages: list[str]):
    def find(tree: ast.Module) -> list[ast.expr]:
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "INSTALLED_APPS" for t in node.targets):
                return [elt for elt in getattr(node.value, "elts", [])
                        if isinstance(elt, ast.Constant) and elt.value in packages]
        return []
    return find


def url_include_entries(packages: list[str]):
    includes = {f"{package}.urls" for package in packages}

    def find(tree: ast.Module) -> list[ast.expr]:
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "urlpatterns" for t in node.targets):
                return [elt for elt in getattr(node.value, "elts", []) if isinstance(elt, ast.Call)
                        and any(isinstance(arg, ast.Call) and arg.args and isinstance(arg.args[0], ast.Constant)
                                and arg.args[0].value in includes for arg in elt.args)]
        return []
    return find


def api_import_entries(packages: list[str]):
    modules = {f"{package}.api" for package in packages}

    def find(tree: ast.Module) -> list[ast.stmt]:
        return [node for node in tree.body if isinstance(node, ast.ImportFrom) and node.module in modules]
    return find


def api_router_entries(packages: list[str]):
    """The ``router.register(…)`` lines of the kinds' viewsets (those imported from a kind's ``api`` module)."""
    def find(tree: ast.Module) -> list[ast.stmt]:
        viewsets = {alias.asname or alias.name for node in api_import_entries(packages)(tree) for alias in node.names}
        return [node for node in tree.body if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "attr", "") == "register" and len(node.value.args) > 1
                and getattr(node.value.args[1], "id", "") in viewsets]
    return find


def cli_imports(tree: ast.Module) -> list[ast.stmt]:
    return [node for node in tree.body if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("slipway.")]


def cli_commands(tree: ast.Module) -> list[ast.stmt]:
    """The root group's ``cli.add_command(…)`` lines (slipway/cli.py)."""
    return [node for node in tree.body if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "attr", "") == "add_command"]


def add_glossary_column(path: Path, noun: str) -> None:
    """Add the kind's column to the glossary's table of states (docs/glossary.md "States")."""
    lines = path.read_text().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith(GLOSSARY_HEADER)), None)
    if start is None:
        raise CommandError(f"{path}: no table of states (a line starting {GLOSSARY_HEADER!r}) to add a column to")
    lines[start] = lines[start].rstrip("\n") + f" {noun} states |\n"
    lines[start + 1] = lines[start + 1].rstrip("\n") + " --- |\n"
    row = start + 2
    while row < len(lines) and lines[row].startswith("|"):
        word = lines[row].split("|")[1].strip().split(" ")[0]
        if word not in GLOSSARY_CELLS:
            raise CommandError(f"{path}: the table of states has a row {word!r} the command does not know")
        lines[row] = lines[row].rstrip("\n") + f" {GLOSSARY_CELLS[word]} |\n"
        row += 1
    path.write_text("".join(lines))


class Command(TemplateCommand):
    help = ("Scaffold a new workload kind NAME (its app package, a plural) from the test kind, wire it into "
            "the settings and URLs, and make its migration: it passes the suite as generated.")
    rewrite_template_suffixes = ((".py-tpl", ".py"), (".html-tpl", ".html"))

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="The app package, app label and URL namespace: lowercase, a plural.")
        parser.add_argument("--noun", help="What people call one (default: NAME without its final s).")
        parser.add_argument("--plural", help="What people call several, and its URL path (default: NAME).")
        parser.add_argument("--prefix", help="Its identity prefix, lowercase letters (default: the noun's letters).")

    def handle(self, *args, **options) -> None:
        repo = Path(settings.BASE_DIR)
        name = options["name"]
        names = derive(name, options["noun"], options["plural"], options["prefix"])
        problems = refusals(repo, name, names)
        if problems:
            raise CommandError(f"cannot start the kind {name!r}: " + "; ".join(problems) + ".")
        packages = project_kind_packages()
        context = {**names, "nav_order": str(max((Pages.of(k).nav.order for k in kinds() if Pages.of(k).nav), default=0) + 10),
                   "template": None, "extensions": ["py", "html"], "files": [], "verbosity": options["verbosity"]}
        (repo / "tests" / name).mkdir()
        super().handle("app", name, str(repo / "tests" / name), **{**context, "template": str(TEMPLATES / "tests")})
        (repo / name).mkdir()
        super().handle("app", name, str(repo / name), **{**context, "template": str(TEMPLATES / "app")})
        self._render_cli(repo, name, context)
        insert_after_last(repo / "portal" / "settings.py", installed_kind_entries(packages), f'"{name}",')
        insert_after_last(repo / "portal" / "urls.py", url_include_entries(packages), f'path("", include("{name}.urls")),')
        api_urls, viewset = repo / "portal" / "api_urls.py", f"{names['model_name']}ViewSet"
        insert_after_last(api_urls, api_router_entries(packages),
                          f'router.register("{names["plural"]}", {viewset}, basename="{names["noun"]}")')
        insert_after_last(api_urls, api_import_entries(packages), f"from {name}.api import {viewset}")
        add_glossary_column(repo / GLOSSARY, names["noun"])
        cli = repo / "slipway" / "cli.py"
        insert_after_last(cli, cli_commands, f'cli.add_command({names["noun"]})')
        insert_after_last(cli, cli_commands, f'cli.add_command({names["noun"]}, "{names["plural"]}")')
        insert_after_last(cli, cli_imports, f"from slipway.{name} import {names['noun']}")
        self._sort_imports(repo, name)
        self._manage(repo, "makemigrations", name, "--verbosity", "0")
        (repo / "deploy" / "rbac.yaml").write_text(self._manage(repo, "rbac"))
        self.stdout.write(self.report(name, names))

    def validate_name(self, name, name_or_dir="name") -> None:
        """Nothing: :func:`refusals` checked the name before anything was written, and the directories made for
        the templates would now read as a module of that name to the template machinery's own check."""

    def _render_cli(self, repo: Path, name: str, context: dict) -> None:
        """Its module of verbs ``slipway/NAME.py`` and its test ``tests/cli/test_NAME.py``: rendered apart and moved
        in, since the template machinery formats the whole directory it renders into (black, when installed)."""
        for template, target in (("cli", repo / "slipway" / f"{name}.py"),
                                 ("cli_tests", repo / "tests" / "cli" / f"test_{name}.py")):
            with tempfile.TemporaryDirectory() as rendered:
                super().handle("app", name, rendered, **{**context, "template": str(TEMPLATES / template)})
                shutil.move(Path(rendered) / target.name, target)

    def _sort_imports(self, repo: Path, name: str) -> None:
        """Sort the new files' imports with the project's linter (``make test`` runs it): where the kind's own
        imports go among the others depends on its name, which a template cannot know. Django's template
        machinery runs a formatter it finds (black) the same way; without ruff installed, ruff check says so."""
        ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
        if not Path(ruff).exists():
            self.stderr.write(f"ruff not found: sort the imports of {name}/ and tests/{name}/ (ruff check --fix).")
            return
        touched = [name, f"tests/{name}", "portal/api_urls.py", f"slipway/{name}.py", "slipway/cli.py",
                   f"tests/cli/test_{name}.py"]
        subprocess.run([ruff, "check", "--quiet", "--fix", "--select", "I", *touched], cwd=repo,
                       capture_output=True, check=False)

    def _manage(self, repo: Path, *arguments: str) -> str:
        """``manage.py`` in a fresh process on the product's settings, which now install the new app; its output."""
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings"}
        done = subprocess.run([sys.executable, "manage.py", *arguments], cwd=repo, env=env, capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            raise CommandError(f"manage.py {' '.join(arguments)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def report(self, name: str, names: dict[str, str]) -> str:
        noun, plural, prefix = names["noun"], names["plural"], names["prefix"]
        written = [
            (f"{name}/", "the app: model, kind (registered in apps.py), builder, status mapping, services, API,"),
            ("", "list page and page, admin, migrations/0001_initial.py (makemigrations)"),
            (f"tests/{name}/", "submit -> admitted -> running -> ended on the fake cluster, its API, its pages"),
            ("portal/settings.py", f'"{name}" in INSTALLED_APPS, after the last kind'),
            ("portal/urls.py", "its URLs, after the last kind's"),
            ("portal/api_urls.py", f"its viewset at /api/v1/{plural}/, after the last kind's"),
            (f"slipway/{name}.py", f"the `slipway {noun}` group (also `{plural}`), added in slipway/cli.py"),
            (f"tests/cli/test_{name}.py", "its verbs against a live server"),
            ("docs/glossary.md", "its column of the table of states"),
            ("deploy/rbac.yaml", "rendered again with its resource kind (make rbac)"),
        ]
        width = max(len(path) for path, _words in written) + 2
        lines = "\n".join(f"  {path.ljust(width)}{words}" for path, words in written)
        return f"""Started the kind {name!r}: one is called {noun!r}, several {plural!r}, refs read {prefix}:42.

Written:
{lines}

Derived from the registry, nothing to do: its layer (tests/test_layers.py), its names (tests/test_kind_boundaries.py),
its routes in the isolation matrix (tests/test_isolation_matrix.py), its part of the API fuzz (tests/api/test_fuzz.py).

By hand, when the kind grows:
  - its object: {name}/manifests.py builds a custom object no sandbox controller runs; build what your kind runs
    (cluster.manifests' pieces) or add a controller under sandbox/controllers/, and declare it in RESOURCES;
  - routes of its own that change it (an action besides DELETE): their rows in tests/test_isolation_matrix.py;
  - a reason code of its own: one migration of the workloads app (the one table's reason_code choices).
Then: .venv/bin/python -m pytest tests/{name} tests/cli/test_{name}.py tests/test_kind_boundaries.py tests/test_isolation_matrix.py
"""
