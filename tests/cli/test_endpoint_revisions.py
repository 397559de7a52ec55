"""``slipway endpoint rollout|promote|rollback|revisions`` against a live server (docs/serving.md "Revisions,
canary and rollback")."""

from __future__ import annotations

from inference import services
from inference.models import EndpointRevision
from tests.inference.conftest import endpoint_payload


def test_a_canary_rolled_out_listed_rolled_back_and_another_promoted(cli, ep_quota, member, team):
    endpoint = services.create_endpoint(member, team, endpoint_payload(max_replicas=1))
    out = cli("endpoint", "rollout", "llama-chat", "--image", "serve:2", "--args", "--model 'my model'",
              "--env", "MODEL=b", "--strategy", "canary", "--weight", "20")
    assert out.exit_code == 0, out.output
    assert out.stdout.strip() == f"endpoint {endpoint.pk}: revision 2 canary at 20%"
    rev = EndpointRevision.objects.get(endpoint=endpoint, number=2)
    assert rev.spec == {"image": "serve:2", "command": [], "args": ["--model", "my model"], "env": {"MODEL": "b"}}

    listed = cli("endpoint", "revisions", str(endpoint.pk))
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:6] == ["REV", "STATE", "WEIGHT", "REQUESTS", "5XX", "P95"]
    assert lines[1].split()[:4] == ["2", "canary", "20%", "0"] and "serve:2" in lines[1]
    assert lines[2].split()[:3] == ["1", "stable", "80%"]

    # Another rollout while it is live: the server's 409, said.
    refused = cli("endpoint", "rollout", "llama-chat", "--image", "serve:3")
    assert refused.exit_code != 0 and "promote it or roll it back" in refused.output

    rolled = cli("endpoint", "rollback", "llama-chat")
    assert rolled.stdout.strip() == f"endpoint {endpoint.pk}: revision 2 rolled_back at 0%"
    again = cli("endpoint", "rollback", "llama-chat")
    assert again.exit_code != 0 and "no canary revision" in again.output
    assert "by mia" in cli("endpoint", "revisions", "llama-chat").stdout

    cli("endpoint", "rollout", "llama-chat", "--image", "serve:4", "--strategy", "canary", "--weight", "5")
    promoted = cli("endpoint", "promote", "llama-chat")
    assert promoted.stdout.strip() == f"endpoint {endpoint.pk}: revision 3 rolling at 100%"
    assert '"number": 3' in cli("endpoint", "revisions", "llama-chat", "-o", "json").stdout


def test_bad_rollouts_are_said_with_their_field(cli, ep_quota, member, team):
    services.create_endpoint(member, team, endpoint_payload(max_replicas=1))
    no_weight = cli("endpoint", "rollout", "llama-chat", "--image", "serve:2", "--strategy", "canary")
    assert no_weight.exit_code == 2 and "weight" in no_weight.output and "A canary needs a weight" in no_weight.output
    bad_env = cli("endpoint", "rollout", "llama-chat", "--env", "NOEQUALS")
    assert bad_env.exit_code == 2 and "is not KEY=VALUE" in bad_env.output
    nothing = cli("endpoint", "rollout", "llama-chat")
    assert nothing.exit_code == 2 and "needs a new image, command, args or env" in nothing.output
    assert EndpointRevision.objects.count() == 1


def test_a_canary_while_a_replace_rolls_out_is_refused_saying_why(cli, ep_quota, member, team):
    services.create_endpoint(member, team, endpoint_payload(max_replicas=1))
    assert cli("endpoint", "rollout", "llama-chat", "--image", "serve:2").exit_code == 0
    refused = cli("endpoint", "rollout", "llama-chat", "--image", "serve:3", "--strategy", "canary", "--weight", "20")
    assert refused.exit_code != 0 and "Revision 2 is still rolling out" in refused.output
