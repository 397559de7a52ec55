"""Image references: their grammar and their parts, as the container runtime reads them.

One reading for the portal's input check (:mod:`workloads.validation`) and the simulated
cluster's kubelet and registry (:mod:`sandbox.registry`), so an image the form accepts is one
the sandbox can pull, and a malformed one is ``InvalidImageName`` there as on a real node.

Pure: no Django, no network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOCKER_HUB = "docker.io"
#: registry[:port]/path/to/name[:tag][@sha256:hex] — lowercase path components as Docker requires.
IMAGE_REF = re.compile(
    r"^(?:(?P<registry>(?:\[[0-9a-fA-F:.]+\]|[a-zA-Z0-9.-]+)(?::[0-9]+)?)/)?"
    r"(?P<path>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
#: The tag a reference without one (and without a digest) pulls.
DEFAULT_TAG = "latest"


@dataclass(frozen=True)
class ImageRef:
    """A well-formed reference split as the runtime splits it.

    ``repository`` is the full name the registry serves (``docker.io/library/busybox`` for
    ``busybox``); ``tag`` is ``latest`` when neither a tag nor a digest is given.
    """

    registry: str
    repository: str
    tag: str
    digest: str


def image_registry(image: str) -> str:
    """The registry (``host[:port]`` as written) of an image reference; ``docker.io`` when it has none.

    The first path component is a host when it contains ``.`` or ``:``, is ``localhost`` or
    has an upper-case letter: ``distribution/reference``'s rule, so Slipway and the runtime
    agree on where the image comes from (``metadata/x`` is Docker Hub's ``metadata/x``,
    ``Metadata/x`` is the host ``metadata``).
    """
    first, sep, _rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        return first
    return DOCKER_HUB


def parse_image(image: str) -> ImageRef | None:
    """The parts of ``image``; None when it is not a valid reference (the runtime's InvalidImageName)."""
    if not IMAGE_REF.fullmatch(image):
        return None
    registry = image_registry(image)
    rest = image.removeprefix(f"{registry}/") if image.startswith(f"{registry}/") else image
    rest, _at, digest = rest.partition("@")
    path, colon, tag = rest.rpartition(":")
    if not colon:
        path, tag = rest, ""
    # An upper-case host would be fine, an upper-case path is not (the grammar's lowercase rule).
    if path != path.lower() or not path:
        return None
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"  # Docker Hub's official images
    return ImageRef(registry, f"{registry}/{path}", tag or ("" if digest else DEFAULT_TAG), digest)
