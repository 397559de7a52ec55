"""The portal's endpoint forms (create and edit).

They only turn text inputs into the API's shape (command lines split into argv as a shell
splits words but never run by one, ``KEY=VALUE`` env lines, the autoscale object from its parts); every field is validated by
:func:`inference.validation.parse_endpoint_request` inside the service, and its errors are
mapped back onto the form field by field.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from billing.pricing import PriceBook
from core.forms import ServiceErrorsForm
from fleet.models import GpuFlavor
from inference import constants as c
from inference import specs
from inference.constants import Engine, Metric, Rollout
from inference.validation import MAX_AUTO_PROMOTE_WINDOWS, MAX_CANARY_WEIGHT
from quotas.facts import ClusterWaits
from workloads.constants import MAX_UNITS_PER_NODE
from workloads.forms import (
    FlavorSelect,
    command_line_field,
    flavor_label,
    parse_env,
    put_argv,
    secret_env_field,
    secret_env_lines,
)

AUTOSCALE_PARTS = ("metric", "target", "engine", "query")


def whole_number(low: int, high: int) -> forms.NumberInput:
    """A number input (phones show digits); the bounds are hints, the validation stays the service's."""
    return forms.NumberInput(attrs={"min": low, "max": high, "step": 1, "inputmode": "numeric"})


def gpu_name(product: str) -> str:
    """"NVIDIA-A100-SXM4-80GB" (the node label) → "A100 80GB": the model and its memory, for people."""
    parts = [p for p in product.removeprefix("NVIDIA-").split("-") if not p.startswith(("SXM", "PCIE", "NVL"))]
    return " ".join(parts) or product


def mig_explanation(flavor: GpuFlavor) -> str:
    """"1g.10gb — 1/7 of an A100 80GB, 10 GB memory" (empty for full GPUs)."""
    if not flavor.mig_profile:
        return ""
    sevenths = round(Decimal(flavor.gpu_fraction) * 7)
    share = f"{sevenths}/7" if abs(Decimal(sevenths) / 7 - Decimal(flavor.gpu_fraction)) < Decimal("0.01") else (
        f"{Decimal(flavor.gpu_fraction):.2f}")
    return f"{flavor.mig_profile} — {share} of an {gpu_name(flavor.gpu_model)}, {flavor.gpu_memory_gb} GB memory"


class EndpointEditForm(forms.Form):
    """What a PATCH may change (docs/api.md): image, env, secret env, sizes, autoscaling, the scale-down delay.

    Secret env is write-only: the field starts blank, and blank keeps the endpoint's secret env
    as it is; typed ``KEY=VALUE`` lines replace all of it (names and values), which rolls the
    endpoint. Its current names are listed in the help text, never a value.
    """

    image = forms.CharField(max_length=300)
    env = forms.CharField(required=False, label="Environment variables",
                          widget=forms.Textarea(attrs={"rows": 3, "placeholder": "MODEL=llama-3-8b"}),
                          help_text="KEY=VALUE, one per line.")
    secret_env = secret_env_field(placeholder="HF_TOKEN=…")
    min_replicas = forms.CharField(
        initial="1", label="Minimum replicas", widget=whole_number(0, c.MAX_REPLICAS),
        help_text="Guaranteed: reserved against the team quota. 0 scales to zero when idle; the first request then "
                  "waits for a replica to start and load its model (a cold start).")
    max_replicas = forms.CharField(
        initial="1", label="Maximum replicas", widget=whole_number(1, c.MAX_REPLICAS),
        help_text="Replicas above the minimum are burst: granted from free quota and budget while needed. Lowered "
                  "below what runs, the replicas above it stop at once.")
    metric = forms.ChoiceField(choices=Metric.choices, initial=Metric.GPU_UTILIZATION)
    target = forms.CharField(required=False, initial=str(specs.DEFAULT_GPU_UTILIZATION_TARGET),
                             widget=forms.NumberInput(attrs={"min": 0, "step": "any", "inputmode": "decimal"}),
                             help_text="Per replica: % GPU, requests/s, queue length or requests in flight at the "
                                       "gateway.")
    engine = forms.ChoiceField(required=False, choices=[("", "—"), *Engine.choices], help_text="queue_length only.")
    query = forms.CharField(required=False, max_length=c.MAX_QUERY_LENGTH,
                            help_text="PromQL, prometheus only. It reads your team's namespace only: "
                                      "namespace=\"…\" is added to each selector that names none.")
    scale_down_delay_seconds = forms.CharField(
        initial=str(specs.DEFAULT_SCALE_DOWN_DELAY_SECONDS), label="Scale-down delay (seconds)",
        widget=whole_number(0, c.MAX_SCALE_DOWN_DELAY_SECONDS),
        help_text="How long demand must stay lower before burst units are given back and an idle endpoint "
                  "sleeps; the cluster's autoscaler stops replicas after at most an hour of it.")

    # How a new image or env rolls out (docs/serving.md "Revisions, canary and rollback"): an edit's only.
    rollout = forms.ChoiceField(
        choices=Rollout.choices, initial=Rollout.REPLACE, required=False, label="Roll out a new image or env",
        help_text="Replace: the replicas roll to it one by one. Canary: it runs beside the current revision on "
                  "replicas of its own (from your team's free quota) and takes the weight below of the requests; "
                  "rolled back on its own when its errors or latency are worse, promoted by you (or after the good "
                  "windows below).")
    weight = forms.CharField(required=False, label="Canary weight (%)", widget=whole_number(1, MAX_CANARY_WEIGHT),
                             help_text=f"The percent of requests the canary serves, 1 to {MAX_CANARY_WEIGHT}.")
    auto_promote_windows = forms.CharField(
        required=False, label="Promote after good windows", widget=whole_number(0, MAX_AUTO_PROMOTE_WINDOWS),
        help_text="Optional: promote it on its own after this many consecutive good 30 s windows (0 or blank: by hand).")

    field_order = ["image", "env", "secret_env", "rollout", "weight", "auto_promote_windows", "min_replicas",
                   "max_replicas", "metric", "target", "engine", "query", "scale_down_delay_seconds"]

    FIELDS = ("image", "env", "min_replicas", "max_replicas", "scale_down_delay_seconds")
    #: An existing endpoint's form: blank secret env keeps what it has (the help text says so).
    EDITS = True

    def __init__(self, *args: Any, secret_names: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.api_data: dict[str, Any] = {}
        if self.EDITS:
            now = f"Now: {', '.join(secret_names)}." if secret_names else "Now: none."
            self.fields["secret_env"].help_text = (
                now + " Leave blank to keep them. KEY=VALUE lines, one per line, take the place of all of them (a "
                "name left out is removed) and roll the endpoint's replicas; values are never shown, to you neither.")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        data: dict[str, Any] = {name: cleaned[name].strip() for name in self.FIELDS
                                if name != "env" and cleaned.get(name) not in (None, "")}
        try:
            data["env"] = parse_env(cleaned.get("env") or "")
        except ValidationError as exc:
            self.add_error("env", exc)
        if (cleaned.get("secret_env") or "").strip():  # blank: an edit keeps the secret env, a create has none
            try:
                data["secret_env"] = secret_env_lines(cleaned["secret_env"])
            except ValidationError as exc:
                self.add_error("secret_env", exc)
        autoscale: dict[str, Any] = {"metric": cleaned.get("metric") or Metric.GPU_UTILIZATION}
        for part in ("target", "engine", "query"):
            if cleaned.get(part):
                autoscale[part] = cleaned[part].strip()
        data["autoscale"] = autoscale
        if self.EDITS and cleaned.get("rollout") == Rollout.CANARY:
            data["rollout"] = Rollout.CANARY
            for name in ("weight", "auto_promote_windows"):
                if (cleaned.get(name) or "").strip():
                    data[name] = cleaned[name].strip()
        self.api_data = self.more_fields(cleaned, data)
        return cleaned

    def more_fields(self, cleaned: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        """The fields only a new endpoint has (an edit has none beyond its own)."""
        return data

    def add_service_errors(self, error: ValidationError) -> None:
        """Put the service's field errors next to the matching inputs: an autoscale error next to
        its part ("query: …" by the query), others of autoscale on the metric."""
        own = set(self.errors)  # fields the form's own checks already explained
        for field, messages in error.message_dict.items():
            for message in messages:
                target = field if field in self.fields else None
                if field == "autoscale":
                    part, _, rest = message.partition(": ")
                    target, message = (part, rest) if part in AUTOSCALE_PARTS and rest else ("metric", message)
                if target in own:
                    continue
                self.add_error(target, message)


class EndpointForm(EndpointEditForm):
    """Everything of a new endpoint (docs/api.md ``POST /endpoints/``)."""

    name = forms.CharField(max_length=40, help_text="Lowercase letters, digits and '-', starting with a letter.")
    flavor = forms.ChoiceField(choices=())
    gpus_per_replica = forms.CharField(initial="1", label="GPUs per replica", help_text="1 for MIG slices.",
                                       widget=whole_number(1, MAX_UNITS_PER_NODE))
    command = command_line_field(
        required=False, label="Command", placeholder="vllm serve /models/llama --port 8080",
        help_text="Optional (the image's entrypoint otherwise); split as a shell splits words, never run by one.")
    args = command_line_field(required=False, label="Arguments", placeholder="--max-model-len 8192",
                              help_text="Split the same way.")
    secret_env = secret_env_field(placeholder="HF_TOKEN=…")
    EDITS = False
    # A new endpoint is its revision 1: nothing to roll out.
    rollout = weight = auto_promote_windows = None
    port = forms.CharField(initial=str(specs.DEFAULT_PORT), widget=whole_number(1, 65535))
    readiness_path = forms.CharField(initial=specs.DEFAULT_READINESS_PATH)
    startup_timeout_seconds = forms.CharField(
        initial=str(specs.DEFAULT_STARTUP_TIMEOUT_SECONDS), label="Startup timeout (seconds)",
        widget=whole_number(10, c.MAX_STARTUP_TIMEOUT_SECONDS),
        help_text="How long one replica may take to start and load its model before it is restarted. Every new "
                  "replica (scaling up, waking from zero, a new image) serves only once loaded.")
    spot = forms.BooleanField(required=False, help_text="Spot price; the pods may be evicted.")
    gpu_memory_gb = forms.CharField(
        required=False, label="GPU memory per replica (GB)",
        widget=forms.NumberInput(attrs={"min": 0, "step": "any", "inputmode": "decimal"}),
        help_text="Optional: what the model needs. The preview warns when the flavor's memory per unit is less.")
    for_reservation = forms.CharField(
        required=False, label="For reservation",
        help_text="A booking of the team's: its minimum goes into the booking's window, ahead of other work, and "
                  "waits for it.")

    field_order = ["name", "image", "command", "args", "env", "secret_env", "flavor", "gpus_per_replica",
                   "gpu_memory_gb", "min_replicas",
                   "max_replicas", "metric", "target", "engine", "query", "scale_down_delay_seconds", "port",
                   "readiness_path", "startup_timeout_seconds", "spot", "for_reservation"]

    # Sections of the page (templates cannot pass arguments, hence one property each).
    SERVE = ("name", "image", "command", "args", "env", "secret_env", "port", "readiness_path", "startup_timeout_seconds")
    SCALING = ("flavor", "gpus_per_replica", "gpu_memory_gb", "min_replicas", "max_replicas", "metric", "target", "engine", "query",
               "scale_down_delay_seconds", "spot", "for_reservation")

    @property
    def serve_fields(self) -> list:
        return [self[name] for name in self.SERVE]

    @property
    def scaling_fields(self) -> list:
        return [self[name] for name in self.SCALING]

    def __init__(self, *args: Any, flavors: list[GpuFlavor] = (), usage: list[dict] = (), currency: str = "USD",
                 reservations: list[tuple[str, str]] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The team's bookings not over (workloads.services.reservation_choices).
        self.fields["for_reservation"].widget = forms.Select(choices=list(reservations) or [("", "None")])
        # Read per form, not at import: the install's serving image (a prefilled form's own wins), as the
        # run form's SLIPWAY_DEFAULT_RUN_IMAGE.
        self.fields["image"].initial = settings.SLIPWAY_DEFAULT_ENDPOINT_IMAGE
        rows = {row["flavor"]: row for row in usage}
        book, waits = PriceBook(), ClusterWaits()  # every flavor's price and cluster state from one read each
        without_quota = {f.name for f in flavors if rows.get(f.name, {}).get("limit", 0) == 0}
        choices = [("", "— choose a flavor —")] + [
            (f.name, flavor_label(f, rows.get(f.name), currency, book, waits)
             + (f" · {mig_explanation(f)}" if f.mig_profile else ""))
            for f in flavors]
        self.fields["flavor"].choices = choices
        self.fields["flavor"].widget = FlavorSelect(choices=choices, disabled_values=without_quota)

    def more_fields(self, cleaned: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        for name in ("name", "flavor", "gpus_per_replica", "port", "readiness_path", "startup_timeout_seconds",
                     "gpu_memory_gb", "for_reservation"):
            if cleaned.get(name) not in (None, ""):
                data[name] = cleaned[name].strip()
        put_argv(self, cleaned, data)
        data["spot"] = bool(cleaned.get("spot"))
        return data


class ApiKeyForm(ServiceErrorsForm):
    """Create an API key (the endpoint's Keys section, the team's keys page); the service checks the rest."""

    name = forms.CharField(max_length=100, help_text="To tell it apart: the application or person using it.")
    expires_at = forms.DateTimeField(required=False, label="Expires",
                                     widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                                     help_text="Empty: never (revoke it when no longer needed).")
    requests_per_minute = forms.IntegerField(required=False, min_value=1, max_value=2**31 - 1,
                                             label="Requests per minute", help_text="Empty: no limit; past it, 429.")
    tokens_per_minute = forms.IntegerField(required=False, min_value=1, max_value=2**31 - 1,
                                           label="Tokens per minute", help_text="Input + output tokens; empty: no limit.")
