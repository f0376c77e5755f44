from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "fleet.accounts"
    label = "accounts"

    def ready(self) -> None:
        # the logout signal (live_sessions); a user's role, password or is_active changed
        # (live_users): the live sockets concerned check again
        from fleet.accounts import live_sessions, live_users  # noqa: F401

        live_users.connect()
