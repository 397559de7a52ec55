"""A pruned run is finished (``jobs.constants.FINAL_STATES``): its name is free again, as the submission's check says.

The index of unfinished run names was made when a run ended succeeded, failed or cancelled; ``pruned`` came with
sweeps and was never added to it, so a run named as a pruned one passed the check and was refused by the index
("already has an active run named …") — and a team could never prune two trials of one name.
"""

from django.db import migrations

from workloads.migrations._one_table import LiveNamesFinal


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0019_applied_training_api"),
    ]

    operations = [
        LiveNamesFinal("uniq_active_run_name", "run", ("succeeded", "failed", "cancelled"),
                       ("succeeded", "failed", "cancelled", "pruned")),
    ]
