"""``manage.py device_plugin_config``: the NVIDIA device plugin's sharing configs, from the flavors.

Renders one ConfigMap (:func:`cluster.manifests.device_plugin.build_device_plugin_configmap`): a
config per active time-sliced or MPS flavor, named after it, and the default config ``none`` that
shares nothing. The configs are checked against the device plugin's rules
(:func:`cluster.nvidia.configmap_errors`) before a byte is written, so a flavor the plugin would
refuse (or silently not share) fails here with the reason. Output goes to stdout, or to
``--output FILE``; ``deploy/device-plugin/`` holds the demo flavors' (docs/admin.md "Shared GPUs"
says how to apply it and label the nodes).
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from cluster.manifests.device_plugin import DEFAULT_NAMESPACE, build_device_plugin_configmap, render
from cluster.nvidia import configmap_errors
from fleet.models import GpuFlavor


class Command(BaseCommand):
    help = ("Print the NVIDIA device plugin sharing ConfigMap for the active time-sliced and MPS flavors "
            "(one config per flavor, named after it, plus the default 'none').")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", "-o", metavar="FILE", help="Write the YAML to FILE instead of stdout.")
        parser.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                            help=f"Namespace of the device plugin (default: {DEFAULT_NAMESPACE}, the GPU Operator's).")

    def handle(self, *args, output: str | None = None, namespace: str = DEFAULT_NAMESPACE, **options) -> None:
        flavors = [flavor.to_spec() for flavor in GpuFlavor.objects.usable()]
        configmap = build_device_plugin_configmap(flavors, namespace=namespace)
        if errors := configmap_errors(configmap):
            raise CommandError("the device plugin would refuse these configs:\n  " + "\n  ".join(errors))
        if len(configmap["data"]) == 1:
            self.stderr.write("No active time-sliced or MPS flavor: only the default config 'none'.")
        text = render(configmap)
        if output is None:
            self.stdout.write(text, ending="")
            return
        path = Path(output)
        if not path.parent.is_dir():
            raise CommandError(f"{path.parent} is no directory: cannot write {path}")
        path.write_text(text)
        self.stderr.write(f"Wrote {len(configmap['data'])} configs to {path}.")
