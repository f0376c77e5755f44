"""`manage.py create_api_key --user U [--name N]`: print a new API key for a user (once)."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from fleet.accounts.services import api_key_create


class Command(BaseCommand):
    help = "Create an API key (Bearer tdm_...) for a user and print it; it is not shown again."

    def add_arguments(self, parser):
        parser.add_argument("--user", required=True, help="username of the key's owner")
        parser.add_argument("--name", default="cli", help="a label for the key")

    def handle(self, *args, user, name, **options):
        owner = get_user_model().objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"no user named {user!r}")
        key, plain = api_key_create(user=owner, name=name)
        self.stderr.write(f"API key {key.prefix} ({name}) for {owner.username}; shown once:")
        self.stdout.write(plain)
