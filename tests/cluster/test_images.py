"""Image references read as the container runtime reads them (``cluster.images``)."""

from __future__ import annotations

import pytest

from cluster.images import ImageRef, parse_image


@pytest.mark.parametrize(("image", "expected"), [
    ("registry.example.com/ml/trainer:1.4", ImageRef("registry.example.com", "registry.example.com/ml/trainer", "1.4", "")),
    ("registry.example.com:5000/ml/t", ImageRef("registry.example.com:5000", "registry.example.com:5000/ml/t", "latest", "")),
    ("busybox", ImageRef("docker.io", "docker.io/library/busybox", "latest", "")),
    ("pytorch/pytorch:2.4.0", ImageRef("docker.io", "docker.io/pytorch/pytorch", "2.4.0", "")),
    ("localhost/x:1", ImageRef("localhost", "localhost/x", "1", "")),
    ("ghcr.io/o/x@sha256:" + "a" * 64, ImageRef("ghcr.io", "ghcr.io/o/x", "", "sha256:" + "a" * 64)),
])
def test_it_splits_a_reference_into_registry_repository_and_tag(image, expected):
    assert parse_image(image) == expected


@pytest.mark.parametrize("image", ["Bad Image", "registry.example.com/ML/trainer:1", "x:", "x::1", "", "/x",
                                   "registry.example.com/ml/trainer:1.4 ", "a/b@sha256:12"])
def test_it_refuses_a_malformed_reference(image):
    assert parse_image(image) is None
