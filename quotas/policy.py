"""Which flavor for which work: the advice of the GPU sharing trade-offs, as rules and as words (issue 37).

One GPU may be whole, cut by MIG into hardware slices, time-sliced or shared with MPS
(:data:`cluster.specs.SHARINGS`). What each is good for is in :data:`GUIDE` — the table the
"Which flavor?" page and docs/flavors.md show. From it come two things, each in one function:

* :func:`refusals` — what a flavor never takes: a training run on a flavor marked
  ``training=False``; on a time-sliced or MPS flavor a distributed run (its workers would share
  one GPU's memory and compute with strangers, and NCCL across replicas of one GPU buys nothing)
  or a pod asking for more than one unit (the device plugin fails such requests,
  ``failRequestsGreaterThanOne``: a pod cannot add up slices of one GPU). Each refusal names a
  flavor to use instead (:func:`instead`). Every kind's service asks it on submission and in its
  preview, so the API, the form and the dry run refuse alike (a 400 with field errors).
* :func:`warnings` — what is allowed but contradicts the advice: a pod that needs more GPU memory
  than a unit has, time-sliced pods that together outgrow the GPU they share, training on a
  time-sliced flavor. The preview (the form's panel, the dry run) shows them; nothing is refused.

:func:`traits` says a flavor's sharing in the words the flavor picker and the help page use.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from billing.pricing import PriceBook
from cluster import specs
from fleet.models import GpuFlavor


@dataclass(frozen=True)
class SharingAdvice:
    """One row of the "Which flavor?" table: what a way of sharing a GPU gives, and what it suits."""

    sharing: str
    label: str
    isolation: str
    memory: str
    good_for: str
    not_for: str


#: The guides' advice, one row per sharing (the help page, docs/flavors.md and ``slipway flavors --guide``).
GUIDE = (
    SharingAdvice(specs.SHARING_NONE, specs.SHARING_LABELS[specs.SHARING_NONE], specs.ISOLATION[specs.SHARING_NONE],
                  "all of the GPU's, its own",
                  "training, distributed training, large models, anything that needs the whole GPU",
                  "light inference and notebooks that leave most of it idle (you pay for all of it)"),
    SharingAdvice(specs.SHARING_MIG, specs.SHARING_LABELS[specs.SHARING_MIG], specs.ISOLATION[specs.SHARING_MIG],
                  "its slice's, its own (hardware-enforced)",
                  "multi-tenant and security-sensitive work, inference with a predictable size, small training",
                  "models larger than the slice's memory"),
    SharingAdvice(specs.SHARING_TIME_SLICING, specs.SHARING_LABELS[specs.SHARING_TIME_SLICING],
                  specs.ISOLATION[specs.SHARING_TIME_SLICING],
                  "the whole GPU's, shared: no limit per pod, one pod can use it all and the others run out",
                  "light inference, notebooks and development that use the GPU now and then",
                  "training that needs the whole GPU memory, distributed runs, more than one unit per pod, "
                  "work of teams that must not disturb each other"),
    SharingAdvice(specs.SHARING_MPS, specs.SHARING_LABELS[specs.SHARING_MPS], specs.ISOLATION[specs.SHARING_MPS],
                  "a limit per pod (the GPU's / replicas); one pod's fault reaches the others",
                  "concurrent small jobs of one team: small training, batch inference, many light endpoints",
                  "distributed runs, more than one unit per pod, mixing teams that do not trust each other"),
)


@dataclass(frozen=True)
class Shape:
    """What a piece of work asks of its flavor: whether it trains, how many pods run as one job
    (a run's workers; 1 for an endpoint's replicas, which are independent), units per pod."""

    training: bool
    workers: int = 1
    units_per_pod: int = 1
    #: The shared memory a run asks for (``shm_gb``; None: not said).
    shm_gb: float | None = None


@dataclass(frozen=True)
class Refusals:
    """Why a flavor does not take a piece of work, per what the user must change ("" where nothing)."""

    flavor: str = ""
    workers: str = ""
    units_per_pod: str = ""

    def __bool__(self) -> bool:
        return bool(self.flavor or self.workers or self.units_per_pod)

    def errors(self, units_field: str, workers_field: str = "workers") -> dict[str, list[str]]:
        """As field errors of a kind's request: its units-per-pod field is ``units_field``."""
        pairs = (("flavor", self.flavor), (workers_field, self.workers), (units_field, self.units_per_pod))
        return {field: [message] for field, message in pairs if message}


def gb(value: Decimal | float | int) -> str:
    """"12", "12.5": GB as people write them (a Decimal's trailing zeros dropped)."""
    return f"{Decimal(str(value)).normalize():f}"


def share_words(flavor: GpuFlavor) -> str:
    """"1/4 of a Tesla-T4": what one unit of a time-sliced or MPS flavor is."""
    return f"1/{flavor.replicas} of a {flavor.gpu_model}"


def instead(flavor: GpuFlavor, *, training: bool) -> GpuFlavor | None:
    """The flavor to suggest instead of ``flavor``: a usable whole-GPU flavor (one that takes training
    runs, for a run) — of the same GPU model when there is one, else the cheapest. One query."""
    candidates = GpuFlavor.objects.usable().filter(sharing=specs.SHARING_NONE).exclude(pk=flavor.pk)
    if training:
        candidates = candidates.filter(training=True)
    choices = sorted(candidates, key=lambda f: (f.gpu_model != flavor.gpu_model, f.price_per_hour, f.name))
    return choices[0] if choices else None


def refusals(flavor: GpuFlavor, shape: Shape) -> Refusals:
    """What ``flavor`` refuses of work of ``shape`` (empty when it takes it): see the module docstring."""
    not_training = shape.training and not flavor.training
    distributed = flavor.replicated and shape.workers > 1
    several = flavor.replicated and shape.units_per_pod > 1
    if not (not_training or distributed or several):
        return Refusals()
    other = instead(flavor, training=shape.training)
    use = f" Use {other.name} ({other.gpu_model}, whole GPUs) instead." if other else ""
    # With no whole-GPU flavor to name, say so rather than advise what this flavor refuses anyway
    # (one worker of a flavor that takes no training is refused too).
    none_open = " No whole-GPU flavor is open for it now: ask a platform admin for one."
    kind = "an MPS" if flavor.sharing == specs.SHARING_MPS else "a time-sliced"
    return Refusals(
        flavor=(f"{flavor.name} does not take training runs: its GPUs are meant for inference and development."
                + (use or none_open)) if not_training else "",
        workers=(f"{flavor.name} is {kind} share of one GPU ({share_words(flavor)}): a distributed run "
                 f"(workers > 1) needs whole GPUs, not replicas that share one GPU's memory and compute."
                 + (use or (" Use 1 worker." if flavor.training else none_open))) if distributed else "",
        units_per_pod=(f"{flavor.name} gives each pod one unit ({share_words(flavor)}): a pod cannot add up "
                       f"units of a shared GPU (the device plugin refuses more than one). Ask for 1."
                       + (f" For more GPU use {other.name}." if other else "")) if several else "",
    )


def warnings(flavor: GpuFlavor, shape: Shape, gpu_memory_gb: float | None) -> tuple[str, ...]:
    """Advice ``flavor`` contradicts for work of ``shape`` whose pods each need ``gpu_memory_gb``
    of GPU memory (None: not said). Nothing is refused for it."""
    found: list[str] = []
    per_unit = flavor.memory_per_unit_gb
    if gpu_memory_gb is not None:
        # A pod of a shared flavor has one unit; of a whole GPU or a MIG flavor, its units' memory added up.
        needed = Decimal(str(gpu_memory_gb))
        have = per_unit * (1 if flavor.replicated else shape.units_per_pod)
        if needed > have:
            where = {
                specs.SHARING_TIME_SLICING: f"a time-sliced {flavor.gpu_memory_gb} GB {flavor.gpu_model}, whose "
                                            "memory its other pods use too",
                specs.SHARING_MPS: f"an MPS unit limited to {gb(per_unit)} GB of a {flavor.gpu_model}",
                specs.SHARING_MIG: f"a MIG slice with {gb(per_unit)} GB",
            }.get(flavor.sharing, f"{gb(have)} GB of {flavor.gpu_model} memory")
            found.append(f"A pod that needs {gb(gpu_memory_gb)} GB of GPU memory on {flavor.name} ({where}) will run "
                         "out of memory (OOMKilled): pick a flavor with more memory per unit.")
        elif flavor.memory_is_shared and needed * flavor.replicas > flavor.gpu_memory_gb:
            fits = int(Decimal(flavor.gpu_memory_gb) // needed)
            found.append(f"{flavor.name} shares one {flavor.gpu_memory_gb} GB {flavor.gpu_model} between up to "
                         f"{flavor.replicas} pods with no memory isolation: at {gb(gpu_memory_gb)} GB each, more than "
                         f"{fits} on one GPU run out of memory and one of them is OOMKilled.")
    if shape.shm_gb is not None and flavor.sharing == specs.SHARING_MPS:
        # The device plugin mounts the MPS daemon's shared memory at /dev/shm in MPS pods; the builders
        # then leave out the work's own shm volume, so the size goes unused.
        found.append(f"{flavor.name} is an MPS flavor: its pods' /dev/shm is the MPS daemon's, so shm_gb "
                     f"({gb(shape.shm_gb)} GB) has no effect there.")
    if shape.training and flavor.sharing == specs.SHARING_TIME_SLICING and flavor.training:
        found.append(f"{flavor.name} is time-sliced: a training run takes turns on the GPU with up to "
                     f"{flavor.replicas - 1} other pods and shares its memory with them. Time-slicing suits light "
                     "inference and development; train on whole GPUs, MIG slices or MPS.")
    return tuple(found)


def traits(flavor: GpuFlavor) -> str:
    """"Time-sliced ×4 · no isolation · 16 GB shared": a flavor's sharing, isolation and memory per
    unit, as the flavor picker and the help page say them."""
    label = specs.SHARING_LABELS[flavor.sharing]
    if flavor.replicated:
        label = f"{label} \u00d7{flavor.replicas}"
    memory = f"{gb(flavor.memory_per_unit_gb)} GB {'shared' if flavor.memory_is_shared else 'own'}"
    isolation = {"exclusive": "exclusive", "none": "no isolation"}.get(flavor.isolation, f"{flavor.isolation} isolation")
    words = [label, isolation, memory]
    if not flavor.training:
        words.append("no training")
    return " \u00b7 ".join(words)


@dataclass(frozen=True)
class FlavorRow:
    """One flavor on the "Which flavor?" page: its sharing, isolation, memory per unit and price per unit-hour."""

    flavor: GpuFlavor
    traits: str
    price: str  #: the one price of a unit-hour now, in words (:meth:`billing.pricing.Quote.words`)


def flavor_rows(currency: str) -> list[FlavorRow]:
    """The flavors that may be requested, cheapest unit first, as the help page lists them (one read of the clusters)."""
    book = PriceBook()
    flavors = sorted(GpuFlavor.objects.usable(), key=lambda f: (book.quote(f).price, f.name))
    return [FlavorRow(f, traits(f), book.quote(f).words(currency)) for f in flavors]
