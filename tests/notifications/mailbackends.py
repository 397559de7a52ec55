"""Mail backends for the tests (``EMAIL_BACKEND`` names a class): a server that refuses one recipient, and one that
can be down. Both go through Django's mail API as the SMTP backend does; what they were handed is kept in ``sent``."""

from __future__ import annotations

import smtplib
from typing import ClassVar

from django.core.mail.backends.base import BaseEmailBackend

#: The recipient :class:`Picky` refuses.
REFUSED = "vic@example.com"


class Picky(BaseEmailBackend):
    """Refuses :data:`REFUSED` as an SMTP server refuses an unknown mailbox (550 to RCPT TO); sends the rest."""

    sent: ClassVar[list[list[str]]] = []

    def send_messages(self, messages) -> int:
        for message in messages:
            if REFUSED in message.to:
                raise smtplib.SMTPRecipientsRefused({REFUSED: (550, b"5.1.1 No such user")})
            self.sent.append(list(message.to))
        return len(messages)


class Flaky(BaseEmailBackend):
    """Refuses the connection while ``down``, as a server that is not there; sends once it is up."""

    down: ClassVar[bool] = True
    calls: ClassVar[int] = 0
    sent: ClassVar[list[list[str]]] = []

    def send_messages(self, messages) -> int:
        type(self).calls += 1
        if self.down:
            raise ConnectionRefusedError(111, "Connection refused")
        self.sent.extend(list(message.to) for message in messages)
        return len(messages)


class Locked(BaseEmailBackend):
    """Refuses the platform's login as an SMTP relay does (535), with its own words: an account and a host."""

    REPLY: ClassVar[bytes] = b"5.7.8 Username and Password not accepted for relay-bot@platform.internal (smtp-7.corp)"

    def send_messages(self, messages) -> int:
        raise smtplib.SMTPAuthenticationError(535, self.REPLY)
