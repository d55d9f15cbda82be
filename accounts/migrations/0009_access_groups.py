# Reserved for model access groups (the access-groups helper fills it): hand-written operations go here.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0008_key_rotation"),
    ]

    operations = []
