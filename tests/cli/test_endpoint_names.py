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
