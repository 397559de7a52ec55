from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tinykind', '0004_preemption'),
    ]

    operations = [
        migrations.AddField(
            model_name='notebook',
            name='attempt',
            field=models.PositiveIntegerField(db_default=1, default=1),
        ),
    ]
