# Reserved for key rotation (the rotation helper fills it): hand-written operations go here.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0007_directory_roles"),
    ]

    operations = []
