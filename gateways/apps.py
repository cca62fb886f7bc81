from django.apps import AppConfig


class GatewaysConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "gateways"
