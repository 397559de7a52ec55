"""``manage.py create_api_token <username> [--expires-days N] [--name NAME]``.

For bootstrapping automation without a browser. The raw token is printed once, on its own
line on stdout (so ``$(manage.py create_api_token ci)`` captures just the token), and only
its hash is stored; the notes go to stderr.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.formatting import format_when
from teams.models import ApiToken
from teams.services import create_api_token

MAX_EXPIRES_DAYS = 3650  # the same bound as the portal's form


class Command(BaseCommand):
    help = "Create a personal API token for a user and print it (it is shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        # Parsed here rather than with type=int, so a bad value is a CommandError with the
        # command's own wording instead of argparse's generic message.
        parser.add_argument("--expires-days", dest="expires_days", default=None, metavar="N",
                            help=f"Days until the token expires (1-{MAX_EXPIRES_DAYS}); default: never.")
        parser.add_argument("--name", default="cli", help="What the token is for (default: 'cli').")

    def handle(self, *args, username: str, expires_days: str | None, name: str, **options) -> None:
        days = parse_expires_days(expires_days)
        name = name.strip()
        if not name or len(name) > 100:
            raise CommandError("--name must be 1 to 100 characters.")
        if "\x00" in name or "\x00" in username:  # PostgreSQL text cannot hold NUL
            raise CommandError("The user name and --name must not contain NUL characters.")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        if not user.is_active:
            raise CommandError(f"User {username!r} is inactive; a token for them would never authenticate.")
        token, raw = create_api_token(user, name, days, origin=ApiToken.Origin.COMMAND)
        expiry = f"expires {format_when(token.expires_at)}" if token.expires_at else "does not expire"
        self.stderr.write(f"Token {token.name!r} for {username} ({expiry}). Copy it now; it is not shown again:")
        self.stdout.write(raw)


def parse_expires_days(value: str | None) -> int | None:
    """``None`` (never expires) or a whole number of days in range; CommandError otherwise."""
    if value is None:
        return None
    try:
        days = int(value)
    except ValueError:
        raise CommandError(f"--expires-days must be a whole number of days, got {value!r}.") from None
    if not 1 <= days <= MAX_EXPIRES_DAYS:
        raise CommandError(f"--expires-days must be between 1 and {MAX_EXPIRES_DAYS}, got {days}.")
    return days
