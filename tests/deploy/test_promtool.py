"""deploy/prometheus/ with Prometheus' own tool: ``promtool check rules`` on every PrometheusRule's groups,
and ``promtool test rules`` on the GPU rules' unit tests (tests/deploy/promtool/: thresholds,
durations, the per-workload figures, and the hysteresis of ``keep_firing_for``).

promtool is Debian's (package ``prometheus``, installed by scripts/ensure_chromium.sh). Outside CI a
machine without it skips these; in CI (``CI=true``) a missing promtool fails them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
UNIT_TESTS = Path(__file__).resolve().parent / "promtool"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("promtool is missing: scripts/ensure_chromium.sh installs Debian's prometheus package")
        pytest.skip("needs promtool (Debian's prometheus package; CI installs it)")
    return found


def rule_files() -> list[Path]:
    return sorted(DEPLOY.glob("*.yaml"))


def extract(source: Path, into: Path) -> Path:
    """The Prometheus rule file inside ``source``'s PrometheusRule (its ``spec``: the groups), as promtool reads it."""
    [doc] = [d for d in yaml.safe_load_all(source.read_text()) if d is not None]
    assert doc["kind"] == "PrometheusRule"
    target = into / source.name
    target.write_text(yaml.safe_dump({"groups": doc["spec"]["groups"]}, sort_keys=False, allow_unicode=True))
    return target


def run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_there_are_the_slipway_and_the_gpu_rules():
    assert [path.name for path in rule_files()] == ["gpu-rules.yaml", "slipway-rules.yaml"]


@pytest.mark.parametrize("source", rule_files(), ids=lambda path: path.name)
def test_promtool_checks_each_rule_file(promtool, tmp_path, source):
    result = run(promtool, "check", "rules", str(extract(source, tmp_path)), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_refuses_a_broken_rule(promtool, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"alert": "Broken", "expr": "namespace_workload:dcgm_gpu_utilization:avg <", "for": "5m"}]}]}))
    result = run(promtool, "check", "rules", str(broken), cwd=tmp_path)
    assert result.returncode != 0


@pytest.mark.parametrize("unit_tests", sorted(UNIT_TESTS.glob("*.test.yaml")), ids=lambda path: path.name)
def test_the_rules_pass_their_unit_tests(promtool, tmp_path, unit_tests):
    for name in yaml.safe_load(unit_tests.read_text())["rule_files"]:
        extract(DEPLOY / name, tmp_path)
    shutil.copy(unit_tests, tmp_path / unit_tests.name)
    result = run(promtool, "test", "rules", unit_tests.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_a_unit_test_that_expects_the_wrong_thing_fails(promtool, tmp_path):
    """The unit tests can fail: the idle alert expected ten minutes early is a failure."""
    extract(DEPLOY / "gpu-rules.yaml", tmp_path)
    unit = yaml.safe_load((UNIT_TESTS / "gpu-rules.test.yaml").read_text())
    idle = next(test for test in unit["tests"] if test.get("alert_rule_test", [{}])[0].get("alertname") == "SlipwayGPUIdle")
    idle["alert_rule_test"] = [{**idle["alert_rule_test"][1], "eval_time": "21m"}]
    unit["tests"] = [idle]
    (tmp_path / "wrong.test.yaml").write_text(yaml.safe_dump(unit, sort_keys=False, allow_unicode=True))
    result = run(promtool, "test", "rules", "wrong.test.yaml", cwd=tmp_path)
    assert result.returncode != 0 and "SlipwayGPUIdle" in result.stdout + result.stderr
