"""Field validation every workload kind shares: the checks of what ends up in a manifest.

Everything here reaches a Kubernetes object, so it is strict (docs/design.md "Security rules"): argv lists
(never a shell string), environment variable names, DNS names, an image reference of the
usual grammar from an acceptable registry (``workloads.image_hosts``), mount paths, bounded sizes. A
:class:`Collector` gathers every field's errors so a client hears about all of them at once;
each kind's own validation (its app's ``validation`` module) builds on it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from cluster.images import IMAGE_REF, image_registry
from core.text import has_lone_surrogate
from workloads import constants as c
from workloads.image_hosts import ambiguous_hub_namespace, refused_registry_reason, registry_allowed

# Used with fullmatch: "$" alone would also match before a final newline ("bert\n").
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# /dev covers /dev/shm, which Slipway mounts itself; /run covers the kubelet's and the
# runtimes' sockets.
FORBIDDEN_MOUNT_ROOTS = ("/dev", "/proc", "/sys", "/etc", "/run")
#: Symbolic links every usual base image (Debian, Ubuntu, RHEL: merged /usr) has at its root:
#: a mount at the link lands where it points, so the check compares the target.
MOUNT_PATH_LINKS = {
    "/var/run": "/run", "/var/lock": "/run/lock",
    "/bin": "/usr/bin", "/sbin": "/usr/sbin",
    "/lib": "/usr/lib", "/lib32": "/usr/lib32", "/lib64": "/usr/lib64", "/libx32": "/usr/libx32",
}
#: Where the NVIDIA container runtime puts the node's driver into a GPU container (its libraries,
#: binaries such as nvidia-smi, firmware, ICD files; /usr/local/nvidia on GKE). A volume at one
#: of them, inside one or above one hides the driver the container must use (or gets the
#: runtime's files written into the claim): refused.
DRIVER_PATHS = (
    "/usr/bin", "/usr/lib64", "/usr/lib32", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/i386-linux-gnu", "/usr/lib/nvidia", "/usr/lib/firmware/nvidia", "/usr/local/nvidia",
    "/usr/share/nvidia", "/usr/share/vulkan", "/usr/share/glvnd", "/usr/share/egl",
)
#: Paths the runtime mounts that may sit under a common scratch mount (MPS's pipe directory
#: under /tmp): refused at and inside them only.
DRIVER_LEAF_PATHS = ("/tmp/nvidia-mps",)  # noqa: S108 (a path compared, never opened)
#: The keys a ``volumes[]`` item may have: anything else (``hostPath``, ``subPath``) is refused,
#: not dropped, so a client never believes a field took effect.
VOLUME_KEYS = ("claim", "mount_path", "read_only")
#: Env names that steer the NVIDIA container runtime: on nodes whose toolkit honours them in
#: unprivileged containers, NVIDIA_VISIBLE_DEVICES=all hands a pod every GPU of its node, past
#: its quota. (CUDA_VISIBLE_DEVICES only narrows the devices the container already has: allowed.)
#: ``CUDA_MPS_*`` steer an MPS client past its flavor's share: its pipe directory (another daemon),
#: its thread percentage and pinned memory limit (security review 5 #9b); refused on every flavor.
FORBIDDEN_ENV_PREFIXES = ("NVIDIA_", "CUDA_MPS_")
#: Longest whole number accepted as text: Python refuses int() past 4,300 digits, and no
#: bounded field needs more than a handful.
MAX_NUMBER_DIGITS = 30


# DNS-1035 label: a Service name must start with a letter.
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

@dataclass(frozen=True)
class VolumeRequest:
    claim: str
    mount_path: str
    read_only: bool = False


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def resolve_mount_path(path: str) -> str:
    """``path`` (normalised) with a leading root symlink replaced by its target (/var/lock/x → /run/lock/x)."""
    for link, target in MOUNT_PATH_LINKS.items():
        if _within(path, link):
            return target + path[len(link):]
    return path


def reserved_mount_reason(path: str) -> str | None:
    """Why a volume may not be mounted at ``path`` (normalised, absolute), or None when it may."""
    resolved = resolve_mount_path(path)
    shown = path if resolved == path else f"{path} (which is {resolved} in the container)"
    if resolved == "/" or any(_within(resolved, root) for root in FORBIDDEN_MOUNT_ROOTS):
        return f"{shown} is a reserved path."
    if (any(_within(resolved, p) or _within(p, resolved) for p in DRIVER_PATHS)
            or any(_within(resolved, p) for p in DRIVER_LEAF_PATHS)):
        return f"{shown} is a reserved path: the GPU driver's files are mounted there."
    return None


class Collector:
    """Collects field errors so the client hears about every bad field in one answer."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.errors: dict[str, list[str]] = {}

    def add(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)

    def present(self, name: str) -> bool:
        return name in self.data and self.data[name] is not None and self.data[name] != ""

    def string(self, name: str, *, required: bool = True, max_length: int = 300) -> str:
        value = self.data.get(name)
        if value is None or value == "":
            if required:
                self.add(name, "This field is required.")
            return ""
        if not isinstance(value, str):
            self.add(name, "Must be a string.")
            return ""
        if len(value) > max_length:
            self.add(name, f"Must be at most {max_length} characters.")
        if "\x00" in value:
            self.add(name, "Must not contain NUL characters.")
        if has_lone_surrogate(value):
            self.add(name, "Must be valid Unicode (a lone surrogate was sent).")
        return value

    def integer(self, name: str, default: int | None, lo: int, hi: int) -> int | None:
        if not self.present(name):
            return default
        value = self.data[name]
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            self.add(name, "Must be a whole number.")
            return default
        # Plain digits only: int() would also take "1_0" (10) and "²"-like digits.
        if isinstance(value, str) and not WHOLE_NUMBER.fullmatch(value.strip()):
            self.add(name, "Must be a whole number.")
            return default
        if isinstance(value, str) and len(value.strip()) > MAX_NUMBER_DIGITS:
            self.add(name, f"Must be between {lo} and {hi}.")  # int() refuses past 4,300 digits anyway
            return default
        number = int(value)
        if not lo <= number <= hi:
            self.add(name, f"Must be between {lo} and {hi}.")
        return number

    def number(self, name: str, lo: float, hi: float) -> float | None:
        if not self.present(name):
            return None
        value = self.data[name]
        if isinstance(value, bool):
            self.add(name, "Must be a number.")
            return None
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON integer past float's range
            self.add(name, "Must be a number.")
            return None
        if not lo <= number <= hi:  # also rejects NaN
            self.add(name, f"Must be between {lo:g} and {hi:g}.")
        return number

    def boolean(self, name: str, default: bool) -> bool:
        if name not in self.data or self.data[name] is None:
            return default
        value = self.data[name]
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false", "on", "off", "1", "0"}:
            return value.lower() in {"true", "on", "1"}
        self.add(name, "Must be true or false.")
        return default

    def argv(self, name: str, *, required: bool) -> tuple[str, ...]:
        value = self.data.get(name)
        if value is None or value == []:
            if required:
                self.add(name, "This field is required: a list of strings, e.g. [\"python\", \"train.py\"].")
            return ()
        if isinstance(value, str):
            self.add(name, "Must be a list of strings (argv form), not a shell string.")
            return ()
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.add(name, "Must be a list of strings.")
            return ()
        if len(value) > c.MAX_ARGV_ITEMS:
            self.add(name, f"At most {c.MAX_ARGV_ITEMS} items.")
        if any(len(item) > c.MAX_ARG_LENGTH or "\x00" in item for item in value):
            self.add(name, f"Each item must be at most {c.MAX_ARG_LENGTH} characters, without NUL bytes.")
        if required and value and not value[0].strip():
            self.add(name, "The program (first item) must not be blank.")
        return tuple(value)


def check_name(col: Collector, pattern: re.Pattern = DNS1123_LABEL) -> str:
    name = col.string("name", max_length=c.NAME_MAX_LENGTH)
    if name and not pattern.fullmatch(name):
        start = "a letter" if pattern is DNS1035_LABEL else "a letter or digit"
        col.add("name", f"Use lowercase letters, digits and '-', starting with {start} and ending with a letter "
                        "or digit.")
    return name


def check_image(col: Collector) -> str:
    image = col.string("image", max_length=300)
    if not image:
        return image
    if not IMAGE_REF.fullmatch(image):
        col.add("image", "Not a valid image reference (e.g. registry.example.com/team/trainer:1.4).")
        return image
    # The allow-list, when set, is the only rule; without it the host rules of image_hosts apply.
    allowed = settings.SLIPWAY_ALLOWED_REGISTRIES
    registry = image_registry(image)
    if allowed:
        if not registry_allowed(registry, allowed):
            col.add("image", f"Images must come from an allowed registry: {', '.join(allowed)}.")
        return image
    reason = refused_registry_reason(registry) or ambiguous_hub_namespace(image)
    if reason:
        col.add("image", f"{reason} Images cannot come from loopback, link-local, private, metadata or "
                         "cluster-internal hosts (an operator may allow a registry: SLIPWAY_ALLOWED_REGISTRIES).")
    return image


def check_env(col: Collector, field: str = "env") -> tuple[tuple[str, str], ...]:
    """The env object of ``field`` (``env``, or ``secret_env``) as sorted (name, value) pairs.

    Error messages name variables, never their values (a secret's value must not appear in a 400).
    """
    env = col.data.get(field)
    if env in (None, {}, ""):
        return ()
    if not isinstance(env, Mapping):
        col.add(field, "Must be an object mapping names to string values.")
        return ()
    if len(env) > c.MAX_ENV_VARS:
        col.add(field, f"At most {c.MAX_ENV_VARS} variables.")
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            col.add(field, f"Invalid variable name {key!r}: use letters, digits and '_', not starting with a digit.")
        elif key.upper().startswith(FORBIDDEN_ENV_PREFIXES):
            col.add(field, f"{key} steers the GPU runtime (which GPUs the pod sees); it cannot be set.")
        elif not isinstance(value, str):
            col.add(field, f"The value of {key} must be a string.")
        elif len(value) > c.MAX_ENV_VALUE_LENGTH:
            col.add(field, f"The value of {key} is longer than {c.MAX_ENV_VALUE_LENGTH} characters.")
        elif "\x00" in value:
            col.add(field, f"The value of {key} must not contain NUL characters.")
    return tuple(sorted((str(k), str(v)) for k, v in env.items()))


#: A Kubernetes label key (an optional DNS-subdomain prefix and a name) and value, as a cluster's labels are written.
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
MAX_SELECTOR_LABELS = 10


def check_gpu_memory(col: Collector) -> float | None:
    """``gpu_memory_gb``: the GPU memory each pod needs (optional). Used for advice (a flavor whose unit has
    less is warned about in the preview) and by the sandbox's simulation; never refused for the flavor."""
    return col.number("gpu_memory_gb", 0.1, c.MAX_GPU_MEMORY_GB)


def check_cluster_selector(col: Collector) -> dict[str, str]:
    """``cluster_selector``: labels a cluster must carry to be chosen (docs/api.md "Clusters"); empty: any cluster."""
    selector = col.data.get("cluster_selector")
    if selector in (None, {}, ""):
        return {}
    if not isinstance(selector, Mapping):
        col.add("cluster_selector", 'Must be an object of cluster labels, e.g. {"region": "eu-west"}.')
        return {}
    if len(selector) > MAX_SELECTOR_LABELS:
        col.add("cluster_selector", f"At most {MAX_SELECTOR_LABELS} labels.")
    for key, value in selector.items():
        if not isinstance(key, str) or not LABEL_KEY.fullmatch(key):
            col.add("cluster_selector", f"Invalid label name {key!r}: use letters, digits, '-', '_' and '.'.")
        elif not isinstance(value, str) or not LABEL_VALUE.fullmatch(value):
            col.add("cluster_selector", f"The value of {key} must be a label value (at most 63 letters, digits, "
                                        f"'-', '_' or '.').")
    return {str(k): str(v) for k, v in selector.items()}


#: The largest id ``for_reservation`` may be (the column's, a PositiveIntegerField's on every database).
MAX_RESERVATION_ID = 2_147_483_647


def check_for_reservation(col: Collector) -> int | None:
    """``for_reservation``: the id of the team's reservation the work is for (docs/reservations.md "Open or
    targeted"); null or absent: none. Only its type here: whether the team has it and it takes the work is the
    submission's database check (:func:`workloads.services.reservation_errors`)."""
    return col.integer("for_reservation", None, 1, MAX_RESERVATION_ID)


def check_secret_env(col: Collector, env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``secret_env``: variables whose values go to a Kubernetes Secret, never into the workload's spec.

    Same name rules as ``env``; a name may not be in both (which value would win?); a value
    may not be empty (a "Run again" form shows the names with the values left to type again)
    nor the mask pages show in its place.
    """
    secret = check_env(col, "secret_env")
    if len(env) + len(secret) > c.MAX_ENV_VARS:
        col.add("secret_env", f"At most {c.MAX_ENV_VARS} variables in env and secret_env together.")
    plain = {name for name, _value in env}
    for name, value in secret:
        if name in plain:
            col.add("secret_env", f"{name} is set in env too: set it in one of them.")
        elif value == "":
            col.add("secret_env", f"The value of {name} is empty: type the secret's value.")
        elif value == c.SECRET_MASK:
            col.add("secret_env", f"The value of {name} is the mask pages show for a secret, not its value.")
    return secret


def check_volumes(col: Collector) -> tuple[VolumeRequest, ...]:
    volumes = col.data.get("volumes")
    if volumes in (None, []):
        return ()
    if not isinstance(volumes, list):
        col.add("volumes", "Must be a list of {claim, mount_path, read_only} objects.")
        return ()
    if len(volumes) > c.MAX_VOLUMES:
        col.add("volumes", f"At most {c.MAX_VOLUMES} volumes.")
    out: list[VolumeRequest] = []
    seen_paths: set[str] = set()
    for index, item in enumerate(volumes):
        where = f"Volume {index + 1}"
        if not isinstance(item, Mapping):
            col.add("volumes", f"{where}: must be an object with claim and mount_path.")
            continue
        unknown = sorted(str(key) for key in item if key not in VOLUME_KEYS)
        if unknown:
            col.add("volumes", f"{where}: unknown field(s) {', '.join(unknown)[:200]}; a volume has only "
                               f"{', '.join(VOLUME_KEYS)}.")
            continue
        claim, path, read_only = item.get("claim"), item.get("mount_path"), item.get("read_only", False)
        if not isinstance(claim, str) or len(claim) > 253 or not DNS1123_SUBDOMAIN.fullmatch(claim):
            col.add("volumes", f"{where}: claim must be the name of a PersistentVolumeClaim (DNS-1123).")
            continue
        if (not isinstance(path, str) or not path.startswith("/") or path.rstrip("/") == "" or len(path) > 200
                or any(ch < " " or ch == "\x7f" for ch in path) or ":" in path or has_lone_surrogate(path)):
            col.add("volumes", f"{where}: mount_path must be an absolute path other than '/', without control "
                               "characters or ':'.")
            continue
        # Compare the path the kubelet will mount: "//etc", "/./etc" and "/var//run" are /etc, /var/run.
        if ".." in path.split("/"):
            col.add("volumes", f"{where}: {path} is a reserved path.")
            continue
        normalised = posixpath.normpath(path)
        normalised = "/" + normalised.lstrip("/")
        reason = reserved_mount_reason(normalised)
        if reason:
            col.add("volumes", f"{where}: {reason}")
            continue
        if normalised in seen_paths:
            col.add("volumes", f"{where}: {path} is mounted twice.")
            continue
        if not isinstance(read_only, bool):
            col.add("volumes", f"{where}: read_only must be true or false.")
            continue
        seen_paths.add(normalised)
        out.append(VolumeRequest(claim, normalised, read_only))
    return tuple(out)


