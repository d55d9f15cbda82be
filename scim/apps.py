from django.apps import AppConfig


class ScimConfig(AppConfig):
    name = "scim"
    verbose_name = "SCIM provisioning"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Every sign-in records its session key against the user, so a deprovisioning can
        # end that person's sessions (scim/sessions.py).
        from django.contrib.auth.signals import user_logged_in, user_logged_out

        from scim.sessions import forget_session, remember_session

        user_logged_in.connect(remember_session, dispatch_uid="scim.remember_session")
        user_logged_out.connect(forget_session, dispatch_uid="scim.forget_session")
        # A new directory-roles map: provisioned members take their roles at once.
        from accounts.directory import directory_roles_changed
        from scim.roles import follow_directory

        directory_roles_changed.connect(follow_directory, dispatch_uid="scim.follow_directory")
