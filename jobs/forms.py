"""The portal's "New run" form.

People type text, the API takes JSON. This form only turns the text inputs into the API's
shape (a command line split into argv as a shell splits words — but never run by one —,
``KEY=VALUE`` lines into an object,
``claim:/mount/path[:ro]`` lines into volume objects); every field is then validated by
:func:`jobs.validation.parse_run_request` inside :func:`jobs.services.submit_run`, so the
portal and the API cannot disagree about what is valid. The service's ``ValidationError``
is mapped back onto the form with :meth:`NewRunForm.add_service_errors`, field by field.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

import fleet.services as fleet
from billing.pricing import PriceBook
from cluster.training import DEFAULT_FRAMEWORK, FRAMEWORKS
from core.priority import Priority
from fleet.models import GpuFlavor
from jobs import constants as c
from jobs.models import TrainingRun
from jobs.validation import parse_run_request
from quotas.facts import ClusterWaits
from workloads import secrets
from workloads.constants import NAME_MAX_LENGTH
from workloads.forms import (
    FlavorSelect,
    argv_line,
    command_line_field,
    flavor_label,
    lines,
    parse_env,
    put_argv,
    secret_env_field,
    secret_env_lines,
)


def parse_volumes(text: str) -> list[dict[str, Any]]:
    """``claim:/mount/path[:ro]`` lines into the API's volume objects (paths are checked later)."""
    volumes = []
    for number, raw in enumerate(lines(text), start=1):
        line = raw.strip()
        claim, sep, path = line.partition(":")
        read_only = False
        for suffix, flag in ((":ro", True), (":rw", False)):
            if path.endswith(suffix):
                path, read_only = path[: -len(suffix)], flag
                break
        if not sep or not claim or not path:
            raise ValidationError(f"Line {number}: expected claim:/mount/path or claim:/mount/path:ro, got {line!r}.")
        volumes.append({"claim": claim, "mount_path": path, "read_only": read_only})
    return volumes


class NewRunForm(forms.Form):
    """Text inputs for a run request; :attr:`api_data` holds the API-shaped dict after is_valid()."""

    # Field names are the API's, so a service error on "gpus_per_worker" lands next to the
    # "gpus_per_worker" input.

    name = forms.CharField(max_length=NAME_MAX_LENGTH, help_text="Lowercase letters, digits and '-'.")
    image = forms.CharField(max_length=300, widget=forms.TextInput(attrs={"placeholder": "registry.example.com/team/trainer:1.4"}))
    command = command_line_field(
        required=True, label="Command", placeholder="python train.py --note 'first try'",
        help_text="Split into arguments as a shell splits words (quote an argument with spaces); "
                  "no shell runs it, so $VAR, globs, | and && are passed on literally.")
    args = command_line_field(required=False, label="Arguments", placeholder="--epochs 10",
                              help_text="More arguments after the command, split the same way.")
    env = forms.CharField(required=False, label="Environment",
                          widget=forms.Textarea(attrs={"rows": 3, "placeholder": "WANDB_MODE=offline"}),
                          help_text="KEY=VALUE, one per line.")
    secret_env = secret_env_field(placeholder="WANDB_API_KEY=…")
    flavor = forms.CharField(label="GPU flavor")
    gpus_per_worker = forms.CharField(label="GPUs per worker", initial="1",
                                      widget=forms.NumberInput(attrs={"min": 1, "max": 64}))
    workers = forms.CharField(initial="1", widget=forms.NumberInput(attrs={"min": 1, "max": c.MAX_WORKERS}),
                              help_text="More than one is distributed training: a TrainJob on a Trainer v2 cluster, "
                                        "a PyTorchJob on a v1 one.")
    framework = forms.CharField(required=False, initial=DEFAULT_FRAMEWORK, label="Framework",
                                help_text="What distributed training runs: each is offered where a cluster has a "
                                          "runtime for it (in brackets). One worker runs anywhere.")
    gpu_memory_gb = forms.CharField(
        required=False, label="GPU memory per worker (GB)", widget=forms.NumberInput(attrs={"step": "any", "min": 0}),
        help_text="Optional: what the model needs. The preview warns when the flavor's memory per unit is less.")
    spot = forms.BooleanField(required=False, label="Spot (cheaper, may be interrupted)")
    priority = forms.CharField(initial=Priority.NORMAL, widget=forms.Select(choices=Priority.choices))
    for_reservation = forms.CharField(
        required=False, label="For reservation",
        help_text="A booking of the team's: the run goes into its window, ahead of other work, and waits for it.")
    cpu = forms.CharField(required=False, label="CPUs per worker", widget=forms.NumberInput(attrs={"step": "any", "min": 0}))
    memory_gb = forms.CharField(required=False, label="Memory per worker (GB)",
                                widget=forms.NumberInput(attrs={"step": "any", "min": 0}))
    shm_gb = forms.CharField(required=False, label="Shared memory (GB)",
                             widget=forms.NumberInput(attrs={"step": "any", "min": 0}))
    max_retries = forms.CharField(required=False, initial="2", widget=forms.NumberInput(attrs={"min": 0, "max": c.MAX_RETRIES}))
    max_runtime_minutes = forms.CharField(required=False, label="Max runtime (minutes)",
                                          widget=forms.NumberInput(attrs={"min": 1}))
    volumes = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2, "placeholder": "datasets:/data:ro"}),
                              help_text="claim:/mount/path, add :ro for read-only; one per line.")
    checkpoint = forms.BooleanField(
        required=False, label="Checkpoint contract",
        help_text="The run saves to SLIPWAY_CHECKPOINT_DIR and resumes from SLIPWAY_RESUME_FROM: a preemption "
                  "loses only the work since its last checkpoint.")
    checkpoint_grace_seconds = forms.CharField(
        required=False, label="Grace to save (seconds)", initial=str(c.DEFAULT_CHECKPOINT_GRACE_SECONDS),
        widget=forms.NumberInput(attrs={"min": 1, "max": c.MAX_CHECKPOINT_GRACE_SECONDS}),
        help_text="With the contract: after SIGTERM, this long to save before the pods are killed.")
    checkpoint_volume = forms.CharField(
        required=False, label="Checkpoint volume", max_length=253,
        widget=forms.TextInput(attrs={"placeholder": "team-checkpoints"}),
        help_text="With the contract: a claim of the team's to save to. Empty: Slipway provides one per run.")

    def __init__(self, *args: Any, flavors: list[GpuFlavor] = (), usage: list[dict] = (), currency: str = "USD",
                 reservations: list[tuple[str, str]] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read per form, not at import: the install's base image (a prefilled form's own wins).
        self.fields["image"].initial = settings.SLIPWAY_DEFAULT_RUN_IMAGE
        rows = {row["flavor"]: row for row in usage}
        book, waits = PriceBook(), ClusterWaits()  # every flavor's price and cluster state from one read each
        without_quota = {f.name for f in flavors if rows.get(f.name, {}).get("limit", 0) == 0}
        choices = [("", "— choose a flavor —")] + [(f.name, flavor_label(f, rows.get(f.name), currency, book, waits))
                                                   for f in flavors]
        self.fields["flavor"].widget = FlavorSelect(choices=choices, disabled_values=without_quota)
        # A callable: read when the form renders (the clusters as they are then), not when it is built.
        self.fields["framework"].widget = forms.Select(choices=framework_choices)
        # The team's bookings not over (workloads.services.reservation_choices); a prefilled one kept as typed.
        self.fields["for_reservation"].widget = forms.Select(choices=list(reservations) or [("", "None")])
        self.api_data: dict[str, Any] = {}

    # Sections of the page (templates cannot pass arguments, hence one property each).
    WHAT = ("name", "image", "command", "args", "env", "secret_env", "volumes")
    RESOURCES = ("flavor", "gpus_per_worker", "workers", "framework", "gpu_memory_gb", "spot", "priority", "for_reservation", "checkpoint",
                 "checkpoint_grace_seconds", "checkpoint_volume")
    LIMITS = ("cpu", "memory_gb", "shm_gb", "max_retries", "max_runtime_minutes")

    @property
    def what_fields(self) -> list:
        return [self[name] for name in self.WHAT]

    @property
    def resource_fields(self) -> list:
        return [self[name] for name in self.RESOURCES]

    @property
    def limit_fields(self) -> list:
        return [self[name] for name in self.LIMITS]

    @property
    def limit_errors(self) -> bool:
        return self.is_bound and any(name in self.errors for name in self.LIMITS)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        data: dict[str, Any] = {}
        for name in ("name", "image", "flavor", "gpus_per_worker", "workers", "framework", "priority", "gpu_memory_gb",
                     "for_reservation"):
            if cleaned.get(name) not in (None, ""):
                data[name] = cleaned[name].strip()
        put_argv(self, cleaned, data)
        for name in self.LIMITS:
            if cleaned.get(name) not in (None, ""):
                data[name] = cleaned[name].strip()
        data["spot"] = bool(cleaned.get("spot"))
        if cleaned.get("checkpoint"):
            # The whole contract, as the API takes it: "Run again" fills both from the run's.
            grace = (cleaned.get("checkpoint_grace_seconds") or "").strip()
            volume = (cleaned.get("checkpoint_volume") or "").strip()
            data["checkpoint"] = {**({"grace_seconds": grace} if grace else {}), **({"volume": volume} if volume else {})}
        for name, parse in (("env", parse_env), ("secret_env", secret_env_lines), ("volumes", parse_volumes)):
            try:
                data[name] = parse(cleaned.get(name) or "")
            except ValidationError as exc:
                self.add_error(name, exc)
        self.api_data = data
        # Validate what could be converted now, so every bad field is reported in one answer
        # (submit_run validates again, with the checks that need the database).
        try:
            parse_run_request(data)
        except ValidationError as exc:
            self.add_service_errors(exc)
        return cleaned

    def add_service_errors(self, error: ValidationError) -> None:
        """Put the service's field errors next to the matching inputs (others above the form)."""
        for field, messages in error.message_dict.items():
            target = field if field in self.fields else None
            if target is not None and target in self.errors:
                continue  # the field already says what is wrong (e.g. "This field is required.")
            for message in messages:
                self.add_error(target, message)


def framework_choices() -> list[tuple[str, str]]:
    """The framework picker's options, each naming the clusters that offer it now (:attr:`fleet.models.Cluster.training`,
    the rule placement asks), so a user sees where a distributed run of it can go before the preview says so."""
    clusters = fleet.clusters()
    options = []
    for framework in FRAMEWORKS:
        where = [c.name for c in clusters if c.training.takes(framework)]
        options.append((framework, f"{framework} ({', '.join(where) if where else 'no cluster offers it now'})"))
    return options


def preview_data(form_data) -> dict[str, Any]:
    """The resource fields of a (possibly half-filled or prefilled) form, in the API's shape, for the live preview.

    Name, image and command do not change cost or admission, so fixed stand-ins keep the
    preview from answering "name: This field is required." while the user is still typing.
    """
    data: dict[str, Any] = {"name": "preview", "image": "busybox", "command": ["true"]}
    # The runtime limit prices the whole run (estimated total, its share of the budget).
    # The GPU memory a worker needs: the flavor advice's warnings read it.
    # The reservation it names: its window, not the quota, decides when it starts.
    for name in ("flavor", "gpus_per_worker", "workers", "framework", "priority", "max_runtime_minutes",
                 "gpu_memory_gb", "for_reservation"):
        value = str(form_data.get(name) or "").strip()
        if value:
            data[name] = value
    # A posted checkbox says "on"; a prefilled form's initial holds the boolean itself.
    data["spot"] = form_data.get("spot") in (True, "on", "true", "1")
    return data


def initial_from_run(run: TrainingRun, name: str) -> dict[str, Any]:
    """The form's text inputs holding ``run``'s request ("Run again": edit, then submit), named ``name``.

    The command lines are built so that splitting them gives the run's argv back exactly.
    """
    def text(value) -> str:
        return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)

    volumes = [f"{v['claim']}:{v['mount_path']}{':ro' if v.get('read_only') else ''}" for v in run.volumes]
    return {
        "name": name, "image": run.image, "command": argv_line(run.command), "args": argv_line(run.args),
        "env": "\n".join(f"{k}={v}" for k, v in run.env.items()), "volumes": "\n".join(volumes),
        # Names only: secret values are never put into a page, the user types them again.
        "secret_env": "\n".join(f"{name}=" for name in secrets.names(run)),
        "flavor": run.flavor.name, "gpus_per_worker": str(run.gpus_per_worker), "workers": str(run.workers),
        "framework": run.framework, "spot": run.spot, "priority": run.priority, "cpu": text(run.cpu), "memory_gb": text(run.memory_gb),
        "shm_gb": text(run.shm_gb), "max_retries": str(run.max_retries), "max_runtime_minutes": text(run.max_runtime_minutes),
        "checkpoint": run.checkpoint is not None,
        "checkpoint_grace_seconds": str((run.checkpoint or {}).get("grace_seconds", c.DEFAULT_CHECKPOINT_GRACE_SECONDS)),
        "checkpoint_volume": (run.checkpoint or {}).get("volume") or "", "gpu_memory_gb": text(run.gpu_memory_gb),
        "for_reservation": text(run.for_reservation),
    }
