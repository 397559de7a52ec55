"""cluster.promql: an autoscale query reads its team's namespace only, and cheaply (issue 21, point 1).

A table of queries — the cross-team reads and load levers of the security review, and the
ordinary queries teams write — with what each becomes or why it is refused; then the
properties every answer has: the rewritten query parses to the tree that was checked, scoping
it again changes nothing, and no input (garbage, unicode, huge, deeply nested) raises anything
but :class:`QueryRefused`.
"""

from __future__ import annotations

import random
import string
import time

import promql_parser
import pytest

from cluster.promql import MAX_DEPTH, MAX_QUERY_LENGTH, MAX_SELECTORS, QueryRefused, scope_query

NS = "team-vision"

#: (query, what it becomes): the matcher is injected into every selector, wherever it sits.
SCOPED = [
    ("sum(vllm:num_requests_waiting)", 'sum(vllm:num_requests_waiting{namespace="team-vision"})'),
    ('sum(tgi_queue_size{namespace="team-vision"})', 'sum(tgi_queue_size{namespace="team-vision"})'),  # kept
    ('sum(x{"namespace"="team-vision"})', 'sum(x{namespace="team-vision"})'),  # quoted label name: same label
    ('sum(rate(http_requests_total{service="detector"}[1m]))',
     'sum(rate(http_requests_total{namespace="team-vision",service="detector"}[1m]))'),  # matchers sorted
    # binary operations, both sides, with vector matching
    ("sum(rate(a[5m])) / on (pod) group_left () sum by (pod) (b)",
     'sum(rate(a{namespace="team-vision"}[5m])) / on (pod) group_left () sum by (pod) (b{namespace="team-vision"})'),
    ("x > bool 3 unless y", 'x{namespace="team-vision"} > bool 3 unless y{namespace="team-vision"}'),
    # subqueries, nested function arguments, aggregation parameters
    ("max_over_time(rate(z[1m])[10m:30s])", 'max_over_time(rate(z{namespace="team-vision"}[1m])[10m:30s])'),
    ("rate(x[5m:])", 'rate(x{namespace="team-vision"}[5m:])'),
    ("histogram_quantile(0.9, sum by (le) (rate(lat_bucket[5m])))",
     'histogram_quantile(0.9, sum by (le) (rate(lat_bucket{namespace="team-vision"}[5m])))'),
    ("topk(scalar(k), x)", 'topk(scalar(k{namespace="team-vision"}), x{namespace="team-vision"})'),
    ("-(x) * 2", '-(x{namespace="team-vision"}) * 2'),
    ('label_replace(x, "namespace", "team-nlp", "", "")',  # renames the result, reads team-vision only
     'label_replace(x{namespace="team-vision"}, "namespace", "team-nlp", "", "")'),
    # metric names by __name__, offsets, escapes
    ('{__name__="x"}', '{__name__="x",namespace="team-vision"}'),
    ('{"x.y"}', '{__name__="x.y",namespace="team-vision"}'),
    ("x offset 5m", 'x{namespace="team-vision"} offset 5m'),
    ("x[5m] offset -2m", 'x{namespace="team-vision"}[5m] offset -2m'),
    ('x{a="q\\"u\\\\ö\\n"}', 'x{a="q\\"u\\\\ö\\n",namespace="team-vision"}'),
    ('x{pod=~"ep-7-.*",job!="a"}', 'x{job!="a",namespace="team-vision",pod=~"ep-7-.*"}'),
    ("vector(1)", "vector(1)"),  # reads nothing
]

#: (query, part of the reason): refused, never rewritten.
REFUSED = [
    # other teams' data
    ('sum(DCGM_FI_DEV_GPU_UTIL{namespace="team-nlp"})', "not 'team-nlp'"),
    ('sum(x{namespace=~"team-.*"})', "matched exactly"),
    ('sum(x{namespace=~"team-vision|team-nlp"})', "matched exactly"),
    ('sum(x{namespace!="team-vision"})', "matched exactly"),
    ('sum(x{namespace!~"kube-.*"})', "matched exactly"),
    ('sum(x{namespace="team-vision",namespace="team-nlp"})', "not 'team-nlp'"),
    ('sum(a) + sum(b{namespace="team-nlp"})', "not 'team-nlp'"),  # one bad selector in a binary op
    ('max_over_time(x{namespace="team-nlp"}[5m:1m])', "not 'team-nlp'"),  # inside a subquery
    ('x{a="b" or namespace="team-nlp"}', "'or'"),
    # load levers
    ('count({__name__=~".+"})', "__name__"),
    ('{__name__!~"x",job="a"}', "__name__"),
    ('{__name__!="x",job="a"}', "__name__"),
    ('{__name__=~"y|z",job="a"}', "__name__"),
    ('{job="a"}', "name its metric"),
    ("rate(x[1h])", "at most 10m"),
    ("rate(x[10m1s])", "at most 10m"),
    ("max_over_time(x[1d:1m])", "at most 10m"),
    ("max_over_time(rate(x[1m])[10m:1s])", "at least 10s"),
    ("max_over_time(max_over_time(x[5m:1m])[5m:1m])", "nested"),
    ("x offset 1w", "Offsets"),
    ("x @ 1700000000", "@ modifier"),
    ("x @ start()", "@ modifier"),
    ("info(x)", "info()"),
    (" + ".join(f"m{i}" for i in range(MAX_SELECTORS + 1)), f"At most {MAX_SELECTORS} selectors"),
    ("x" * (MAX_QUERY_LENGTH + 1), f"At most {MAX_QUERY_LENGTH} characters"),
    ("-" * 60 + "x", "nests too deeply"),
    # not a query
    ("", "required"),
    ("   ", "required"),
    ("sum(", "Not valid PromQL"),
    ("x[0s]", "Not valid PromQL"),
    ("SELECT * FROM metrics", "Not valid PromQL"),
    ("x\x00", "NUL"),
    (None, "required"),
    (42, "required"),
    (["sum(x)"], "required"),
]


@pytest.mark.parametrize(("query", "expected"), SCOPED)
def test_it_injects_or_keeps_the_team_namespace_on_every_selector(query: str, expected: str) -> None:
    assert scope_query(query, NS) == expected


@pytest.mark.parametrize(("query", "reason"), REFUSED, ids=[repr(q)[:60] for q, _ in REFUSED])
def test_it_refuses_other_namespaces_and_costly_queries(query, reason: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        scope_query(query, NS)
    assert any(reason in problem for problem in refused.value.problems), refused.value.problems


def test_it_names_every_problem_at_once() -> None:
    with pytest.raises(QueryRefused) as refused:
        scope_query('sum(rate(x{namespace="team-nlp"}[1h])) + count({__name__=~".+"})', NS)
    assert len(refused.value.problems) == 3


@pytest.mark.parametrize(("query", "expected"), SCOPED)
def test_what_it_returns_parses_to_the_same_tree_and_is_a_fixed_point(query: str, expected: str) -> None:
    scoped = scope_query(query, NS)
    assert repr(promql_parser.parse(scoped)) == repr(promql_parser.parse(expected))  # matchers in the same order
    assert scope_query(scoped, NS) == scoped


def test_a_rewrite_that_grows_past_the_limit_is_refused_and_what_fits_is_stored_whole() -> None:
    # 18 selectors of 50 characters: under the limit as written, over it with 18 matchers injected.
    query = " + ".join(f"m{i:02d}_" + "x" * 46 for i in range(18))
    assert len(query) <= MAX_QUERY_LENGTH
    with pytest.raises(QueryRefused, match="With the namespace matcher"):
        scope_query(query, NS)
    fits = " + ".join(f"m{i}" for i in range(MAX_SELECTORS))
    assert len(scope_query(fits, NS)) <= MAX_QUERY_LENGTH


def test_it_only_ever_raises_query_refused_and_answers_fast() -> None:
    """A bounded fuzz: random text, mutated real queries, deep nesting and huge input."""
    rng = random.Random(21)
    alphabet = string.printable + 'éü中\u202e\U0001F600{}[]()"\'`=~!,:@'
    seeds = [q for q, _ in SCOPED] + [q for q, _ in REFUSED if isinstance(q, str)]
    inputs = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))) for _ in range(1500)]
    for _ in range(1500):
        query = rng.choice(seeds)
        at = rng.randrange(len(query) + 1)
        inputs.append(query[:at] + rng.choice(alphabet) + query[at + rng.randint(0, 3):])
    # Each of these is at the length limit; nesting is refused before the parser's slow walks.
    inputs += ["-" * (MAX_QUERY_LENGTH - 1) + "x", "(" * 499 + "x" + ")" * 499, "sum(" * 199 + "x" + ")" * 199,
               "x" + " + 1" * 249, "\U0001F600" * MAX_QUERY_LENGTH, 'x{a="' + "é" * (MAX_QUERY_LENGTH - 7) + '"}',
               "-" * (MAX_DEPTH - 2) + "x"]
    slowest = 0.0
    for query in inputs:
        started = time.perf_counter()
        try:
            scoped = scope_query(query, NS)
        except QueryRefused:
            pass
        else:
            assert scope_query(scoped, NS) == scoped
        slowest = max(slowest, time.perf_counter() - started)
    assert slowest < 2.0, f"one query took {slowest:.2f}s"
