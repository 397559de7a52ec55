"""``manage.py reseal_webhook_secrets``: re-encrypt every webhook's signing secret under the newest key.

The webhook secrets are sealed with the same ``SLIPWAY_SECRET_KEYS`` as secret env values
(workloads.crypto), so a key rotation (docs/security.md) runs this beside ``reseal_secret_env``
before the old key is dropped. Safe to run twice and while the portal serves: a row changed
meanwhile is left as written.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from notifications.models import Webhook
from workloads import crypto


class Command(BaseCommand):
    help = "Re-encrypt every webhook signing secret under the first key of SLIPWAY_SECRET_KEYS (key rotation)."

    def handle(self, *args, **options) -> None:
        count = 0
        for pk, sealed in Webhook.objects.values_list("pk", "sealed_secret").iterator():
            count += Webhook.objects.filter(pk=pk, sealed_secret=sealed).update(sealed_secret=crypto.reseal(sealed))
        self.stdout.write(f"Re-encrypted the secret of {count} webhook{'' if count == 1 else 's'} "
                          "under the first key of SLIPWAY_SECRET_KEYS.")
