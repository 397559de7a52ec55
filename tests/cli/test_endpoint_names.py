"""``slipway endpoint``'s spec errors and names (issue 46 F.5, F.6), against a live server.

A spec written as the portal's form reads (``metric`` and ``target`` beside ``flavor``) is refused
with each field's line and the shape to write, as ``slipway run -f`` names a refused field's line.
``describe`` takes a run's or an endpoint's name as well as its id, looked up in the caller's teams.
"""

from __future__ import annotations

from inference.models import InferenceEndpoint

FLAT = """\
team: ml-research
name: llama-chat
image: registry.example.com/serving/vllm:0.6
flavor: a100-80gb
min_replicas: 1
max_replicas: 2
metric: gpu_utilization
target: 70
"""


def test_a_flat_metric_and_target_name_their_lines_and_the_nested_shape(cli, tmp_path, ep_quota):
    spec = tmp_path / "endpoint.yaml"
    spec.write_text(FLAT)
    for extra in ((), ("--dry-run",)):
        refused = cli("endpoint", "create", "-f", str(spec), *extra)
        assert refused.exit_code == 2, refused.output
        hint = "it goes under autoscale, e.g. autoscale: {metric: gpu_utilization, target: 70}."
        assert f"{spec}, line 7: metric: Not a field of its own: {hint}" in refused.output
        assert f"{spec}, line 8: target: Not a field of its own: {hint}" in refused.output
    assert not InferenceEndpoint.objects.exists()
    nested = tmp_path / "nested.yaml"
    nested.write_text(FLAT.replace("metric: gpu_utilization\ntarget: 70\n",
                                   "autoscale: {metric: gpu_utilization, target: 70}\n"))
    created = cli("endpoint", "create", "-f", str(nested))
    assert created.exit_code == 0, created.output
    # Another unknown field is still said as before, without a line (it has no place in the API at all).
    other = tmp_path / "other.yaml"
    other.write_text(FLAT.replace("metric: gpu_utilization\ntarget: 70\n", "replicas: 3\n").replace("llama-chat", "x"))
    said = cli("endpoint", "create", "-f", str(other))
    assert said.exit_code == 2 and f"{other}: Field(s) unknown: replicas." in said.output


def test_describe_takes_a_name_in_the_callers_teams_for_runs_and_endpoints_alike(
        cli, tmp_path, ep_quota, member, team, other_team, outsider, flavors):
    from jobs.models import TrainingRun
    from tests.factories import add_member

    spec = tmp_path / "endpoint.yaml"
    spec.write_text(FLAT.replace("metric: gpu_utilization\ntarget: 70\n", ""))
    endpoint_id = int(cli("endpoint", "create", "-f", str(spec)).stdout.split()[1])
    by_name = cli("endpoint", "describe", "llama-chat", "-o", "json")
    assert by_name.exit_code == 0, by_name.output
    assert f'"id": {endpoint_id}' in by_name.stdout
    assert cli("endpoint", "describe", "llama-chat").stdout == cli("endpoint", "describe", str(endpoint_id)).stdout

    def run(team, name, state):
        return TrainingRun.objects.create(team=team, created_by=member, name=name, flavor=flavors["l4"], state=state,
                                          image="r.example.com/t:1", command=["python"])
    old = run(team, "bert", "succeeded")
    # One of the name: that one, ended or not.
    assert f"{old.pk} bert" in cli("describe", "bert").stdout
    # Several: the one not ended.
    live = run(team, "bert", "running")
    described = cli("describe", "bert")
    assert described.exit_code == 0 and f"{live.pk} bert" in described.stdout
    # Several live ones (another team of the caller's): a usage error listing them.
    add_member(other_team, member)
    other = run(other_team, "bert", "queued")
    ambiguous = cli("describe", "bert")
    assert ambiguous.exit_code == 2
    assert "3 runs are named bert in your teams: " in ambiguous.output and "Give the id instead." in ambiguous.output
    for candidate in (f"{other.pk} (team {other_team.slug}, queued)", f"{live.pk} (team {team.slug}, running)",
                      f"{old.pk} (team {team.slug}, succeeded)"):
        assert candidate in ambiguous.output
    # Another team's work is not found by its name either (404's exit code), and a missing name says so.
    foreign = run(other_team, "secret-run", "running")
    foreign.team.memberships.filter(user=member).delete()
    for name in ("secret-run", "nothing"):
        missing = cli("describe", name)
        assert missing.exit_code == 4 and f"no run named {name} in your teams" in missing.output
    assert cli("endpoint", "describe", "nothing").exit_code == 4
