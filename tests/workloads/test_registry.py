"""The kind registry refuses a kind that lacks what the shared machinery calls, when the kind is made or
registered — not at the first request that needs the missing member (a 500)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.workloads.holdkind.kind import BlockKind
from tests.workloads.tinykind.kind import NotebookKind
from workloads import registry


def test_the_registered_kinds_have_every_required_member():
    assert {kind.prefix for kind in registry.kinds()} >= {"run", "ep", "ws"}
    for kind in registry.kinds():
        assert registry.register(kind) is kind  # registering again passes its own check


def test_a_kind_without_its_access_helper_or_end_cannot_be_made():
    class NoEnd(NotebookKind):
        end = registry.WorkloadKind.end  # the abstract declaration, not an implementation

    with pytest.raises(TypeError, match="abstract class NoEnd with abstract method end"):
        NoEnd()


def test_a_kind_without_a_model_noun_lifecycle_or_conflict_error_is_not_registered():
    class Bare(NotebookKind):
        model = noun = lifecycle = conflict_error = None

    with pytest.raises(TypeError) as refused:
        registry.register(Bare())
    assert str(refused.value) == ("Bare cannot be registered: it declares no model; it declares no noun; "
                                  "it declares no lifecycle; it declares no conflict_error.")


def test_a_kind_that_shrinks_its_burst_must_give_it_back():
    class Bursty(NotebookKind):
        preempts_burst = True

    with pytest.raises(TypeError, match="sets preempts_burst but does not implement shrink_burst"):
        registry.register(Bursty())


def test_a_kind_created_through_the_api_answers_its_dry_run_too():
    class SubmitOnly(NotebookKind):
        def submit(self, user, team, fields):
            raise AssertionError("never called")

    with pytest.raises(TypeError, match="implements one of submit and preview"):
        registry.register(SubmitOnly())
    assert registry.kind_for("nb").__class__ is not SubmitOnly  # a refused kind never enters the registry


def test_a_kind_says_whether_its_work_has_cluster_objects_and_names_them_only_if_it_does():
    """Empty ``resources`` alone is no declaration: a kind that forgot its resource kinds would have every
    workload failed as vanished. One without objects says so, and then names none, nor a ``gone`` state."""
    class Forgetful(NotebookKind):
        resources = ()

    with pytest.raises(TypeError, match=r"it declares no resources \(a kind whose work has no cluster objects sets "
                                        r"cluster_objects = False\)"):
        registry.register(Forgetful())

    class Confused(NotebookKind):
        cluster_objects = False

    with pytest.raises(TypeError, match="it sets cluster_objects = False but declares resources"):
        registry.register(Confused())

    class Lingering(BlockKind):
        lifecycle = replace(BlockKind.lifecycle, gone="gone")

    with pytest.raises(TypeError, match="it sets cluster_objects = False but its lifecycle has a gone state"):
        registry.register(Lingering())
    assert registry.kind_for("blk").__class__ is BlockKind and registry.kind_for("nb").__class__ is NotebookKind
