"""A runtime limit counts every attempt (docs/glossary.md "Runtime limit"): what a workload's earlier attempts ran,
counted for every workload from its recorded attempts; the reason code of work that ran its whole limit.

``earlier_run_seconds`` is added by plain ``ALTER TABLE … ADD COLUMN`` (a constant default, which SQLite and
PostgreSQL both take in place), as 0014 adds ``provisioning_failures``: Django's own AddField of a column with a
default rebuilds the table on SQLite, and a rebuild loses the kinds' partial unique indexes of unfinished names,
which Django's state does not know (workloads/migrations/_one_table.py, ``LiveNames``). The check is the one
Django gives a positive integer (PostgreSQL names it as Django does: ``<table>_<column>_check``).
"""

from django.db import migrations, models

ADD_EARLIER = ('ALTER TABLE "workloads_workload" ADD COLUMN "earlier_run_seconds" integer DEFAULT 0 NOT NULL '
               'CHECK ("earlier_run_seconds" >= 0)')
DROP_EARLIER = 'ALTER TABLE "workloads_workload" DROP COLUMN "earlier_run_seconds"'

def count_earlier_attempts(apps, schema_editor):
    """Every workload on a later attempt gets what its recorded earlier attempts ran (each from its pods' start to
    its end, as ``workloads.models.ran_between``): the next requeue of work in flight counts them against its
    runtime limit, and a finished run's "Ran for" (``Workload.ran_in_all``) reads them. One query for the
    attempts, one update per workload that has some."""
    Workload = apps.get_model("workloads", "Workload")
    Attempt = apps.get_model("workloads", "Attempt")
    later = {f"{kind}:{number}": (pk, attempt) for pk, kind, number, attempt in
             Workload.objects.filter(attempt__gt=1).values_list("pk", "kind", "number", "attempt").iterator()}
    ran: dict[int, float] = {}
    rows = Attempt.objects.filter(ref__in=list(later), started_at__isnull=False, ended_at__isnull=False)
    for ref, number, started, ended in rows.values_list("ref", "number", "started_at", "ended_at").iterator():
        pk, current = later[ref]
        if number < current:  # a row of the current attempt holds only the logs saved as its pods stopped
            ran[pk] = ran.get(pk, 0.0) + max((ended - started).total_seconds(), 0.0)
    for pk, seconds in ran.items():
        Workload.objects.filter(pk=pk).update(earlier_run_seconds=int(seconds))


class Migration(migrations.Migration):

    dependencies = [
        ('workloads', '0016_interruption_cause'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddField(
                model_name='workload',
                name='earlier_run_seconds',
                field=models.PositiveIntegerField(db_default=0, default=0),
            )],
            database_operations=[migrations.RunSQL(ADD_EARLIER, DROP_EARLIER)],
        ),
        migrations.AlterField(
            model_name='attempt',
            name='end_reason_code',
            field=models.CharField(blank=True, choices=[('', 'Nothing to say'), ('queued', "Waiting in the team's queue (quota or budget)"), ('waiting_for_worker', 'Admitted, waiting for a worker'), ('submitted', 'Submitted to the cluster'), ('cluster', "The cluster's own words"), ('waiting_for_capacity', 'Waiting for cluster capacity'), ('burst_capped', 'Burst capped (quota or budget)'), ('ended_by_user', 'Cancelled or deleted by a user'), ('stopped_by_budget', 'Stopped by the budget policy'), ('no_cluster', "No cluster can take it now (placement's reasons)"), ('provisioning', "Waiting for its elastic pool's new nodes"), ('provisioning_failed', 'Its nodes could not be provisioned; queued again after a backoff'), ('cluster_rejected', 'The cluster rejected it'), ('cluster_unreachable', 'The cluster could not be reached'), ('objects_vanished', 'Its cluster objects disappeared'), ('preempting', 'Being preempted: its pods are stopping'), ('preempted', 'Preempted and queued again'), ('cluster_lost', 'Its cluster does not answer'), ('pruning', 'Being pruned by its sweep: its pods save and stop'), ('pruned', 'Pruned by its sweep: stopped early, its checkpoint kept'), ('stopping', 'Being stopped with its sweep: its pods save and stop'), ('runtime_limit', 'Its runtime limit was used up over its attempts')], default='', max_length=32),
        ),
        migrations.AlterField(
            model_name='workload',
            name='reason_code',
            field=models.CharField(blank=True, choices=[('', 'Nothing to say'), ('queued', "Waiting in the team's queue (quota or budget)"), ('waiting_for_worker', 'Admitted, waiting for a worker'), ('submitted', 'Submitted to the cluster'), ('cluster', "The cluster's own words"), ('waiting_for_capacity', 'Waiting for cluster capacity'), ('burst_capped', 'Burst capped (quota or budget)'), ('ended_by_user', 'Cancelled or deleted by a user'), ('stopped_by_budget', 'Stopped by the budget policy'), ('no_cluster', "No cluster can take it now (placement's reasons)"), ('provisioning', "Waiting for its elastic pool's new nodes"), ('provisioning_failed', 'Its nodes could not be provisioned; queued again after a backoff'), ('cluster_rejected', 'The cluster rejected it'), ('cluster_unreachable', 'The cluster could not be reached'), ('objects_vanished', 'Its cluster objects disappeared'), ('preempting', 'Being preempted: its pods are stopping'), ('preempted', 'Preempted and queued again'), ('cluster_lost', 'Its cluster does not answer'), ('pruning', 'Being pruned by its sweep: its pods save and stop'), ('pruned', 'Pruned by its sweep: stopped early, its checkpoint kept'), ('stopping', 'Being stopped with its sweep: its pods save and stop'), ('runtime_limit', 'Its runtime limit was used up over its attempts')], default='', max_length=32),
        ),
        migrations.RunPython(count_earlier_attempts, migrations.RunPython.noop),
    ]
