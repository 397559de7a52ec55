"""``manage.py reseal_secret_env``: re-encrypt every stored secret env value under the newest key.

Step two of a key rotation (docs/security.md): with a new key first in ``SLIPWAY_SECRET_KEYS``
and the old ones still after it, this rewrites every token under the first key; afterwards the
old keys can be dropped. Safe to run twice and while the portal serves.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from workloads.secrets import reseal_all


class Command(BaseCommand):
    help = "Re-encrypt every stored secret env value under the first key of SLIPWAY_SECRET_KEYS (key rotation)."

    def handle(self, *args, **options) -> None:
        count = reseal_all()
        self.stdout.write(f"Re-encrypted the secret env of {count} workload{'' if count == 1 else 's'} "
                          "under the first key of SLIPWAY_SECRET_KEYS.")
