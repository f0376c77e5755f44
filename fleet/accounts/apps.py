from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "fleet.accounts"
    label = "accounts"

    def ready(self) -> None:
        from fleet.accounts import live_sessions  # noqa: F401  (connects the logout signal)
