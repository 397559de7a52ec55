"""Alert rules: the platform's defaults (``SLIPWAY_ALERT_*``), which a team may tighten and never loosen.

A team's admins set their own idle threshold and duration and memory threshold and duration
(the Team page, ``/api/v1/teams/<slug>/alerts/``); a value looser than the platform's is
refused, and so is nonsense (not a number, out of range). The temperature alert goes to
platform staff, so its rule is staff's alone. At every cycle the rule applied is the tighter of
the team's and the platform's (:func:`rules_for`), so a default that staff tighten later holds
for every team, whatever it set before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from teams.models import AuditEvent, Role, Team
from teams.permissions import require_team
from teams.services import audit
from workloads.models import TeamAlertSettings
from workloads.telemetry.alert_rules import AlertKind, Rule, tighter, tightest


@dataclass(frozen=True)
class Field:
    """One setting a team may tighten: which rule and part it sets, the platform's setting, its unit."""

    name: str
    kind: AlertKind
    part: str  #: "threshold" or "after" (:func:`workloads.telemetry.alert_rules.tighter`)
    setting: str
    unit: str
    label: str

    @property
    def default(self) -> float:
        return getattr(settings, self.setting)

    @property
    def minutes(self) -> bool:
        return self.part == "after"


#: The team's settings, in the order pages and the API show them.
FIELDS = (
    Field("idle_util_pct", AlertKind.IDLE, "threshold", "SLIPWAY_ALERT_IDLE_UTIL_PCT", "%",
          "Idle: GPU utilization under"),
    Field("idle_minutes", AlertKind.IDLE, "after", "SLIPWAY_ALERT_IDLE_MINUTES", "min", "Idle: for at least"),
    Field("memory_pct", AlertKind.MEMORY, "threshold", "SLIPWAY_ALERT_MEMORY_PCT", "%",
          "OOM risk: GPU memory used over"),
    Field("memory_minutes", AlertKind.MEMORY, "after", "SLIPWAY_ALERT_MEMORY_MINUTES", "min", "OOM risk: for at least"),
)
FIELD_NAMES = tuple(f.name for f in FIELDS)
#: Longest duration a team may give (a week): anything longer is a typo, and the platform's is shorter anyway.
MAX_MINUTES = 7 * 24 * 60


def platform_rules() -> dict[AlertKind, Rule]:
    """The platform's rules, from the settings (read at each call: tests and deployments change them)."""
    clear = timedelta(minutes=settings.SLIPWAY_ALERT_CLEAR_MINUTES)
    return {
        AlertKind.IDLE: Rule(AlertKind.IDLE, settings.SLIPWAY_ALERT_IDLE_UTIL_PCT, False,
                             timedelta(minutes=settings.SLIPWAY_ALERT_IDLE_MINUTES), clear),
        AlertKind.MEMORY: Rule(AlertKind.MEMORY, settings.SLIPWAY_ALERT_MEMORY_PCT, True,
                               timedelta(minutes=settings.SLIPWAY_ALERT_MEMORY_MINUTES), clear),
        AlertKind.HOT: Rule(AlertKind.HOT, settings.SLIPWAY_ALERT_TEMP_C, True,
                            timedelta(minutes=settings.SLIPWAY_ALERT_TEMP_MINUTES), clear),
    }


def rules_for(row: TeamAlertSettings | None, platform: dict[AlertKind, Rule] | None = None) -> dict[AlertKind, Rule]:
    """A team's rules: for each part the tighter of its own (``row``; None: it set none) and the platform's."""
    rules = dict(platform or platform_rules())
    if row is None:
        return rules
    for kind in (AlertKind.IDLE, AlertKind.MEMORY):
        rule, own = rules[kind], {f.part: getattr(row, f.name) for f in FIELDS if f.kind == kind}
        threshold = rule.threshold if own["threshold"] is None else tightest(
            kind, "threshold", [rule.threshold, own["threshold"]])
        after = rule.after if own["after"] is None else min(rule.after, timedelta(minutes=own["after"]))
        rules[kind] = Rule(kind, threshold, rule.above, after, rule.clear_after)
    return rules


def problems(values: dict[str, object]) -> dict[str, list[str]]:
    """Why ``values`` (some of :data:`FIELD_NAMES`, None for "the platform's") cannot be a team's: field errors."""
    errors: dict[str, list[str]] = {}
    by_name = {f.name: f for f in FIELDS}
    for name, value in values.items():
        field = by_name.get(name)
        if field is None:
            errors[name] = [f"Unknown setting: the alert settings are {', '.join(FIELD_NAMES)}."]
            continue
        if value is None:
            continue
        problem = _problem(field, value)
        if problem:
            errors[name] = [problem]
    return errors


def _problem(field: Field, value: object) -> str:
    """Why ``value`` cannot be ``field``'s, "" when it can."""
    # Only a float can be infinite or NaN: math.isfinite of an int past a float's range raises (it was a 500), and
    # such an int is then out of every range below.
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            isinstance(value, float) and not math.isfinite(value)):
        return "Must be a number (or null for the platform's)."
    default = field.default
    if field.minutes:
        if value != int(value) or not 1 <= value <= MAX_MINUTES:
            return f"Must be a whole number of minutes from 1 to {MAX_MINUTES}."
        if not tighter(field.kind, field.part, value, default):
            return f"A team may only tighten the platform's rule: at most {default:g} min."
        return ""
    if not 0 < value < 100:
        return "Must be a percentage above 0 and under 100."
    if not tighter(field.kind, field.part, value, default):
        bound = "at least" if field.kind == AlertKind.IDLE else "at most"
        return f"A team may only tighten the platform's rule: {bound} {default:g} %."
    return ""


@dataclass(frozen=True)
class SettingView:
    """One setting as pages and the API show it: the team's own value, the platform's, what applies."""

    field: Field
    own: float | None
    default: float
    effective: float


def team_view(team: Team) -> list[SettingView]:
    """The team's alert settings, each with the platform's and what applies (one query)."""
    row = TeamAlertSettings.objects.filter(team=team).first()
    rules = rules_for(row)
    views = []
    for field in FIELDS:
        rule = rules[field.kind]
        effective = rule.threshold if field.part == "threshold" else rule.after.total_seconds() / 60
        views.append(SettingView(field, getattr(row, field.name) if row else None, field.default, effective))
    return views


def set_team_alert_settings(actor, team: Team, values: dict[str, object], ip: str | None = None) -> TeamAlertSettings:
    """Change some of the team's alert settings (its admins); a looser value or nonsense is refused
    (``ValidationError`` with field errors, nothing written). Audited when something changed."""
    require_team(actor, team, Role.ADMIN)
    errors = problems(values)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        row, _created = TeamAlertSettings.objects.select_for_update().get_or_create(team=team)
        changed = {}
        by_name = {f.name: f for f in FIELDS}
        for name, value in values.items():
            value = None if value is None else (int(value) if by_name[name].minutes else float(value))
            if getattr(row, name) != value:
                setattr(row, name, value)
                changed[name] = value
        if changed:
            row.save()
            audit(AuditEvent.Action.TEAM_SETTINGS_CHANGED, actor=actor, team=team, target=f"alerts of team {team.slug}",
                  ip=ip, **changed)
    return row
