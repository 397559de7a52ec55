"""Elastic pools (docs/pools.md): when a workload's ProvisioningRequest was created, how many failed in a row,
and the two reason codes.

``provisioning_failures`` is added by plain ``ALTER TABLE … ADD COLUMN`` (a constant default, which SQLite and
PostgreSQL both take in place): Django's own AddField of a column with a default rebuilds the table on SQLite,
and a rebuild loses the kinds' partial unique indexes of unfinished names, which Django's state does not know
(workloads/migrations/_one_table.py, ``LiveNames``). A nullable column without a default is added in place by
Django itself.
"""

from django.db import migrations, models

ADD_FAILURES = 'ALTER TABLE "workloads_workload" ADD COLUMN "provisioning_failures" smallint DEFAULT 0 NOT NULL'
DROP_FAILURES = 'ALTER TABLE "workloads_workload" DROP COLUMN "provisioning_failures"'


class Migration(migrations.Migration):

    dependencies = [
        ('workloads', '0013_no_cluster_reason_code'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddField(
                model_name='workload',
                name='provisioning_failures',
                field=models.PositiveSmallIntegerField(db_default=0, default=0),
            )],
            database_operations=[migrations.RunSQL(ADD_FAILURES, DROP_FAILURES)],
        ),
        migrations.AddField(
            model_name='workload',
            name='provisioning_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='attempt',
            name='end_reason_code',
            field=models.CharField(blank=True, choices=[('', 'Nothing to say'), ('queued', "Waiting in the team's queue (quota or budget)"), ('waiting_for_worker', 'Admitted, waiting for a worker'), ('submitted', 'Submitted to the cluster'), ('cluster', "The cluster's own words"), ('waiting_for_capacity', 'Waiting for cluster capacity'), ('burst_capped', 'Burst capped (quota or budget)'), ('ended_by_user', 'Cancelled or deleted by a user'), ('stopped_by_budget', 'Stopped by the budget policy'), ('no_cluster', "No cluster can take it now (placement's reasons)"), ('provisioning', "Waiting for its elastic pool's new nodes"), ('provisioning_failed', 'Its nodes could not be provisioned; queued again after a backoff'), ('cluster_rejected', 'The cluster rejected it'), ('cluster_unreachable', 'The cluster could not be reached'), ('objects_vanished', 'Its cluster objects disappeared'), ('preempting', 'Being preempted: its pods are stopping'), ('preempted', 'Preempted and queued again'), ('cluster_lost', 'Its cluster does not answer'), ('pruning', 'Being pruned by its sweep: its pods save and stop'), ('pruned', 'Pruned by its sweep: stopped early, its checkpoint kept'), ('stopping', 'Being stopped with its sweep: its pods save and stop')], default='', max_length=32),
        ),
        migrations.AlterField(
            model_name='workload',
            name='reason_code',
            field=models.CharField(blank=True, choices=[('', 'Nothing to say'), ('queued', "Waiting in the team's queue (quota or budget)"), ('waiting_for_worker', 'Admitted, waiting for a worker'), ('submitted', 'Submitted to the cluster'), ('cluster', "The cluster's own words"), ('waiting_for_capacity', 'Waiting for cluster capacity'), ('burst_capped', 'Burst capped (quota or budget)'), ('ended_by_user', 'Cancelled or deleted by a user'), ('stopped_by_budget', 'Stopped by the budget policy'), ('no_cluster', "No cluster can take it now (placement's reasons)"), ('provisioning', "Waiting for its elastic pool's new nodes"), ('provisioning_failed', 'Its nodes could not be provisioned; queued again after a backoff'), ('cluster_rejected', 'The cluster rejected it'), ('cluster_unreachable', 'The cluster could not be reached'), ('objects_vanished', 'Its cluster objects disappeared'), ('preempting', 'Being preempted: its pods are stopping'), ('preempted', 'Preempted and queued again'), ('cluster_lost', 'Its cluster does not answer'), ('pruning', 'Being pruned by its sweep: its pods save and stop'), ('pruned', 'Pruned by its sweep: stopped early, its checkpoint kept'), ('stopping', 'Being stopped with its sweep: its pods save and stop')], default='', max_length=32),
        ),
    ]
