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
    class Bursty(NotebookKind, registry.Bursts):
        pass

    with pytest.raises(TypeError, match="it has Bursts but does not implement shrink_burst"):
        registry.register(Bursty())


def test_a_kind_created_through_the_api_answers_its_dry_run_too():
    class SubmitOnly(NotebookKind, registry.Api):
        def submit(self, user, team, fields):
            raise AssertionError("never called")

    with pytest.raises(TypeError, match=r"it has Api but does not implement preview \(the API's create"):
        registry.register(SubmitOnly())
    assert registry.kind_for("nb").__class__ is not SubmitOnly  # a refused kind never enters the registry


def test_a_kind_whose_work_a_sweep_runs_is_created_through_the_api_and_names_its_pruned_state():
    class Half(NotebookKind, registry.Trials):
        def trial_fields(self, fields, name, params):
            return fields

    with pytest.raises(TypeError) as refused:
        registry.register(Half())
    assert "it has Trials but does not implement objective" in str(refused.value)
    assert "it has Trials but not Api" in str(refused.value)
    assert "its lifecycle names no final pruned state" in str(refused.value)
    assert registry.kind_for("nb").__class__ is not Half
    # The run kind has all of it: its pruned state is final, never its failed one.
    runs = next(kind for kind in registry.kinds() if isinstance(kind, registry.Trials))
    assert runs.lifecycle.pruned in runs.model.FINAL_STATES and runs.lifecycle.pruned != runs.lifecycle.failed


def test_the_required_core_is_ten_members_and_the_rest_are_capabilities():
    """The interface a kind must implement is its core; all else is opt-in, and a kind without a capability
    gets the capability's plain behaviour from ``Cap.of`` — never a stub that raises at run time."""
    required = {name for name in ("model", "noun", "lifecycle", "conflict_error")
                if name in registry.WorkloadKind.__annotations__ and not hasattr(registry.WorkloadKind, name)}
    assert required | registry.WorkloadKind.__abstractmethods__ == {
        "model", "noun", "lifecycle", "conflict_error",
        "resource_request", "manifests", "status", "state_for", "get_for_user", "end"}
    capabilities = {registry.Reactions, registry.Checkpoints, registry.Bursts, registry.Pages, registry.StaffActions,
                    registry.Demo, registry.Estimates, registry.Api, registry.Trials, registry.Announces}
    # No capability member is on the core: a kind learns of them only by taking the capability.
    for capability in capabilities:
        own = {name for name in vars(capability) if not name.startswith("_")} - {"of"}
        assert own and not own & set(dir(registry.WorkloadKind)), capability
    # The test kinds show the range: the block kind has no pages and no checkpoints; the shared code asks
    # Cap.of(kind) and gets the plain behaviour, the same object each time.
    block = registry.kind_for("blk")
    assert not isinstance(block, (registry.Pages, registry.Checkpoints, registry.Api))
    assert registry.Pages.of(block).end_verb == "End" and registry.Pages.of(block).nav is None
    assert registry.Checkpoints.of(block) is registry.Checkpoints.of(registry.kind_for("nb"))
    assert registry.Checkpoints.of(block).last_checkpoint_at(object()) is None
    notebook = registry.kind_for("nb")
    assert registry.Pages.of(notebook) is notebook and notebook.end_verb == "Stop"


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
