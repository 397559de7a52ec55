"""The sandbox's image registry: which images exist, so a typo fails as it would on a real node.

The inventory's ``registry:`` maps repositories (``registry.example.com/ml/trainer``) to the
tags they hold. Pulling an image (the kubelet, :mod:`sandbox.controllers.kubelet`) ends one of
three ways, as a real kubelet reports them:

* a malformed reference: ``InvalidImageName``, at once and for good;
* a repository or tag on a host the registry serves (a host named by one of its repositories)
  that it does not hold: ``ErrImagePull`` ("not found"), then ``ImagePullBackOff``;
* anything else pulls: a well-formed image on another host is outside what the sandbox can
  know, and an inventory without a ``registry:`` (the test suite's) knows no host.

The verdict is taken when the pod's plan is compiled (:func:`sandbox.validation.pod_plan`).
"""

from __future__ import annotations

from collections.abc import Mapping

from cluster.images import parse_image

#: The kubelet's waiting reasons for an image that cannot be pulled (cluster.status.IMAGE_PULL_CODES).
ERR_IMAGE_PULL = "ErrImagePull"
INVALID_IMAGE_NAME = "InvalidImageName"


def invalid_image_message(image: str) -> str:
    """The kubelet's message for a reference it cannot parse."""
    return f'Failed to apply default image tag "{image}": couldn\'t parse image name "{image}": invalid reference format'


def pull_error(image: str, catalog: Mapping[str, frozenset[str]]) -> str:
    """The waiting reason a pull of ``image`` ends with ("" when it pulls), given what the registry holds."""
    ref = parse_image(image)
    if ref is None:
        return INVALID_IMAGE_NAME
    served = {repository.partition("/")[0].lower() for repository in catalog}
    if ref.registry.lower() not in served:
        return ""
    tags = catalog.get(ref.repository)
    if tags is None:
        return ERR_IMAGE_PULL
    # A digest names content the sandbox does not model: any digest of a held repository pulls.
    return "" if ref.digest or ref.tag in tags else ERR_IMAGE_PULL
