from django.apps import AppConfig


class RefreshConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "refresh"
