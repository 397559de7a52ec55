"""Tenant scoping of user-written PromQL: the one rule for an endpoint's ``autoscale.query``.

An endpoint that scales on ``metric: prometheus`` hands its PromQL to KEDA, which runs it every
15 s on the platform's shared Prometheus and turns the answer into replica counts the team can
read back (``desired_replicas``, ``replicas``, the scaling log's ``metric_value``). Verbatim, that
is a read of every team's metrics and a load lever on everyone's Prometheus. So a query is
parsed with a real PromQL parser (``promql-parser``, the Rust port of Prometheus' own grammar)
and rewritten:

* **Namespace.** Every vector selector — also inside range vectors, subqueries, function
  arguments, aggregations and binary operations — must select ``namespace="<team namespace>"``.
  When it names no namespace the matcher is *injected* (``sum(vllm:num_requests_waiting)`` is
  fine to write); when it names the team's own it is kept; any other namespace, and any regex
  (``=~``, ``!~``) or negative (``!=``) matcher on ``namespace``, is refused: a silent rewrite of
  a query that asked for someone else's data would scale on something the author did not mean.
* **Cost.** Each selector names its metric, by name or ``__name__="…"`` (no ``{__name__=~".+"}``,
  no ``__name__`` regex or negation); range windows, subquery ranges and offsets are at most
  :data:`MAX_RANGE` (10 minutes); a subquery step, when given, is at least :data:`MIN_STEP`;
  ``@`` modifiers are refused (an autoscaler reads the present), so are nested subqueries
  (their costs multiply) and ``info()`` (it reads series the query does not name); the syntax
  tree is at most :data:`MAX_DEPTH` deep; at most :data:`MAX_SELECTORS`
  selectors; at most :data:`MAX_QUERY_LENGTH` characters, before and after the rewrite (the
  rewritten query is what is stored and shown, so re-submitting it must pass too).

:func:`scope_query` returns the rewritten query in one canonical form: Prometheus' own
formatting (``prettify``), kept on one line. The result is checked before it is returned: it
must parse again to exactly the rewritten syntax tree, and every injected selector must equal
the user's plus the one matcher — anything else is refused rather than stored. Scoping a
scoped query returns it unchanged, so the builders can (and do) apply the same rule again when
they render the ScaledObject: no unscoped query reaches a manifest, whatever is stored.

Pure and Django-free (it lives in ``cluster/`` because the manifest builders call it); the
validation of the kind that stores such queries calls it for the API and the HTML forms.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import promql_parser as pp

#: The label Prometheus' Kubernetes service discovery sets to the scraped pod's namespace.
NAMESPACE_LABEL = "namespace"
#: Longest query accepted, in characters (what the user sends, and the rewritten query).
MAX_QUERY_LENGTH = 1000
#: Longest range window, subquery range or offset.
MAX_RANGE = timedelta(minutes=10)
#: Shortest subquery resolution (a 10-minute subquery at 10 s is 60 evaluations of its inner query).
MIN_STEP = timedelta(seconds=10)
#: Most vector selectors in one query.
MAX_SELECTORS = 20
#: Deepest syntax tree accepted (real autoscaling queries stay under 10).
MAX_DEPTH = 40
#: Functions that read series the query does not name (Prometheus 3's info() joins target_info).
HIDDEN_SERIES_FUNCTIONS = frozenset({"info"})
_NOT_REWRITABLE = "The query could not be rewritten with its namespace matcher; simplify it."
#: How much of the parser's message an error repeats.
_PARSER_MESSAGE_CHARS = 200

_IDENTIFIER = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
#: PromQL spelling of each match operator (the binding's enum is not hashable: keyed by its name).
_OPS = {"MatchOp.Equal": "=", "MatchOp.NotEqual": "!=", "MatchOp.Re": "=~", "MatchOp.NotRe": "!~"}


class QueryRefused(ValueError):
    """The query cannot run for this namespace; ``problems`` says why (one sentence each)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(" ".join(problems))


def scope_query(query: object, namespace: str) -> str:
    """``query`` confined to ``namespace``, in canonical form; raises :class:`QueryRefused`.

    See the module docstring for the rules. ``namespace`` is trusted (the team's, from the portal).
    """
    # 1. Bounds before parsing: the parser's work grows with the text.
    if not isinstance(query, str) or not query.strip():
        raise QueryRefused(["A PromQL query is required."])
    if len(query) > MAX_QUERY_LENGTH:
        raise QueryRefused([f"At most {MAX_QUERY_LENGTH} characters (this one has {len(query)})."])
    if "\x00" in query:
        raise QueryRefused(["The query contains a NUL character."])

    # 2. Parse with Prometheus' grammar.
    try:
        tree = pp.parse(query)
    except Exception as exc:  # the parser raises ValueError; anything else is also "not PromQL"
        raise QueryRefused([f"Not valid PromQL: {str(exc)[:_PARSER_MESSAGE_CHARS]}."]) from None

    # 3. Check every node, and inject the namespace matcher where a selector has none. The
    #    binding's walk and transform slow down steeply with depth (a chain of 400 unary minuses
    #    takes seconds), so the depth is measured first, by a walk of our own that is linear.
    depth = _depth(tree)
    if depth > MAX_DEPTH:
        raise QueryRefused([f"The query nests too deeply (depth {depth}; at most {MAX_DEPTH})."])
    checker = _Checker(namespace)
    pp.walk(tree, pre_visit=checker.visit, post_visit=checker.leave)
    if checker.selectors > MAX_SELECTORS:
        checker.problems.append(f"At most {MAX_SELECTORS} selectors (this query has {checker.selectors}).")
    if checker.problems:
        raise QueryRefused(checker.problems)
    try:
        scoped = pp.transform(tree, post_visit=checker.inject)
    except Exception:  # the binding failed to rebuild the tree: refused, never a server error
        checker.refuse(_NOT_REWRITABLE)
    if checker.problems:
        raise QueryRefused(checker.problems)

    # 4. Serialise, and prove that what is returned is exactly what was checked.
    text = _one_line(scoped)
    try:
        again = pp.parse(text)
    except Exception:
        again = None
    if again is None or _shape(again) != _shape(scoped) or not _all_scoped(again, namespace):
        raise QueryRefused([_NOT_REWRITABLE])
    if len(text) > MAX_QUERY_LENGTH:
        raise QueryRefused([f"With the namespace matcher on each selector the query has {len(text)} characters; "
                            f"at most {MAX_QUERY_LENGTH}."])
    return text


class _Checker:
    """Visits the syntax tree once to check it, then rewrites its selectors."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.problems: list[str] = []
        self.selectors = 0
        self.subquery_depth = 0

    def refuse(self, problem: str) -> None:
        if problem not in self.problems:
            self.problems.append(problem)

    def visit(self, node: pp.Expr) -> None:
        if isinstance(node, pp.VectorSelector):
            self.selectors += 1
            self.check_selector(node)
        elif isinstance(node, pp.MatrixSelector):
            if node.range > MAX_RANGE:
                self.refuse(f"Range windows are at most {_duration(MAX_RANGE)} (found [{_duration(node.range)}]).")
        elif isinstance(node, pp.SubqueryExpr):
            if self.subquery_depth:
                self.refuse("Subqueries cannot be nested (their costs multiply).")
            self.subquery_depth += 1
            if node.range is not None and node.range > MAX_RANGE:
                self.refuse(f"Subquery ranges are at most {_duration(MAX_RANGE)} (found [{_duration(node.range)}:]).")
            if node.step is not None and node.step < MIN_STEP:
                self.refuse(f"A subquery step is at least {_duration(MIN_STEP)} (found :{_duration(node.step)}).")
            self.check_modifiers(node.offset, node.at)
        elif isinstance(node, pp.Call) and node.func.name in HIDDEN_SERIES_FUNCTIONS:
            self.refuse(f"{node.func.name}() reads series the query does not name; it is not allowed.")

    def leave(self, node: pp.Expr) -> None:
        if isinstance(node, pp.SubqueryExpr):
            self.subquery_depth -= 1

    def check_modifiers(self, offset: timedelta | None, at: object) -> None:
        if offset is not None and abs(offset) > MAX_RANGE:
            self.refuse(f"Offsets are at most {_duration(MAX_RANGE)}.")
        if at is not None:
            self.refuse("The @ modifier is not allowed: autoscaling reads the present.")

    def check_selector(self, node: pp.VectorSelector) -> None:
        if node.matchers.or_matchers:
            self.refuse("'or' inside a selector's braces is not allowed.")
        names = [m for m in node.matchers.matchers if m.name == "__name__"]
        if any(m.op != pp.MatchOp.Equal for m in names):
            self.refuse('A metric name must be given exactly: no regex or negation on __name__ (e.g. {__name__=~".+"}).')
        elif not node.name and not names:
            self.refuse("Every selector must name its metric (e.g. vllm:num_requests_waiting{…}).")
        for matcher in node.matchers.matchers:
            if matcher.name != NAMESPACE_LABEL:
                continue
            if matcher.op != pp.MatchOp.Equal:
                self.refuse(f'The namespace label may only be matched exactly: {NAMESPACE_LABEL}="{self.namespace}" '
                            f"(no =~, !~ or !=).")
            elif matcher.value != self.namespace:
                self.refuse(f"A query may only read its team's namespace {self.namespace!r}, not {matcher.value!r}.")
        self.check_modifiers(node.offset, node.at)

    def inject(self, node: pp.Expr) -> pp.Expr | None:
        """``transform`` callback: a selector without the namespace matcher is replaced by one with it."""
        if not isinstance(node, pp.VectorSelector):
            return None
        if any(m.name == NAMESPACE_LABEL for m in node.matchers.matchers):
            return None  # already the team's namespace (anything else was refused above)
        wanted = _signature(node, extra=(("=", NAMESPACE_LABEL, self.namespace),))
        try:
            replacement = pp.parse(_selector_text(node, self.namespace))
        except Exception:  # a selector this module cannot spell: refused below, never a crash
            replacement = None
        if not isinstance(replacement, pp.VectorSelector) or _signature(replacement) != wanted:
            self.refuse(_NOT_REWRITABLE)
            return None
        return replacement


def _shape(tree: pp.Expr) -> tuple[str, list[tuple]]:
    """``tree`` comparable across a print and a parse: Prometheus' formatter sorts a selector's
    matchers, which changes nothing it selects, so selectors are compared as order-free signatures
    and the rest of the tree (every other node and field) as the parser's own ``repr``."""
    selectors: list[tuple] = []

    def placeholder(node: pp.Expr) -> pp.Expr | None:
        if not isinstance(node, pp.VectorSelector):
            return None
        name, matchers, offset, at = _signature(node)
        selectors.append((name, tuple(sorted(matchers)), offset, at))
        return pp.parse(f"slipway_selector_{len(selectors)}")

    return repr(pp.transform(tree, post_visit=placeholder)), selectors


def _all_scoped(tree: pp.Expr, namespace: str) -> bool:
    """Whether every selector of ``tree`` matches exactly ``namespace``, and nothing else on that label."""
    found: list[bool] = []

    def visit(node: pp.Expr) -> None:
        if isinstance(node, pp.VectorSelector):
            matchers = [(_op(m), m.value) for m in node.matchers.matchers if m.name == NAMESPACE_LABEL]
            found.append(matchers == [("=", namespace)] and not node.matchers.or_matchers)

    pp.walk(tree, pre_visit=visit)
    return all(found)


def _children(node: pp.Expr) -> list:
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, pp.AggregateExpr):
        return [node.expr, node.param]
    if isinstance(node, pp.UnaryExpr | pp.ParenExpr | pp.SubqueryExpr):
        return [node.expr]
    if isinstance(node, pp.Call):
        return list(node.args)
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    return []


def _depth(tree: pp.Expr) -> int:
    """Height of the syntax tree, iteratively (each child is fetched once: linear in its size)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:  # past the limit the answer is known
            stack.extend((child, level + 1) for child in _children(node) if isinstance(child, pp.Expr))
    return deepest


def _signature(node: pp.VectorSelector, extra: tuple = ()) -> tuple:
    """What a selector selects, comparable across parses: name, matchers (in order), offset, ``@``."""
    matchers = tuple((_op(m), m.name, m.value) for m in node.matchers.matchers) + extra
    return node.name, matchers, node.offset, None if node.at is None else str(node.at)


def _op(matcher: pp.Matcher) -> str:
    return _OPS[str(matcher.op)]


def _quote(value: str) -> str:
    """A PromQL double-quoted string (JSON's escapes are a subset of what PromQL reads)."""
    return json.dumps(value, ensure_ascii=False)


def _selector_text(node: pp.VectorSelector, namespace: str) -> str:
    """``node`` with the namespace matcher appended, as PromQL (offset kept; ``@`` was refused)."""
    parts = []
    for matcher in node.matchers.matchers:
        name = matcher.name if _IDENTIFIER.fullmatch(matcher.name) else _quote(matcher.name)
        parts.append(f"{name}{_op(matcher)}{_quote(matcher.value)}")
    parts.append(f"{NAMESPACE_LABEL}={_quote(namespace)}")
    name = node.name or ""
    if name and not _METRIC_NAME.fullmatch(name):
        parts.insert(0, f"__name__={_quote(name)}")
        name = ""
    text = name + "{" + ",".join(parts) + "}"
    if node.offset is not None:
        sign = "-" if node.offset < timedelta(0) else ""
        text += f" offset {sign}{_duration(abs(node.offset))}"
    return text


def _one_line(tree: pp.Expr) -> str:
    """Prometheus' own formatting, kept on one line: its line breaks (only ever between tokens)
    become a space, or nothing just inside a parenthesis. The caller re-parses the result."""
    text = ""
    for line in (raw.strip() for raw in tree.prettify().splitlines()):
        if line:
            text += line if not text or text.endswith("(") or line.startswith(")") else " " + line
    return text


def _duration(value: timedelta) -> str:
    return pp.display_duration(value)
