"""The filesystem broker of ``make run`` without Redis, with messages that appear whole.

kombu's filesystem transport creates a message's file and only then locks and writes it, while a consumer
takes files without a lock (it moves one out of the queue's folder and reads it). A consumer that comes
between the two reads an empty message: the worker dies of a ``JSONDecodeError`` ("Unrecoverable error",
kombu#1551, open) and the message is lost — ``make run`` then stops everything, since one of its services
died. Seen on a 2-core machine twelve minutes into the demo.

Here a message is written whole under a name no consumer takes (``….msg.part``: consumers take only
``<queue>.msg``), then renamed to its queue name, which POSIX makes atomic: a consumer sees the whole
message or none. Everything else is kombu's. The ``filesystem://`` scheme resolves to this transport in
every process that loads the Celery app (:mod:`portal.celery`), web and beat publishing as the worker does.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

#: What a message's file is called until it is whole: not ``<queue>.msg``, so no consumer takes it.
PARTIAL_SUFFIX = ".part"


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs) -> None:
        """Put ``payload`` onto ``queue``: written whole, then renamed into the queue (one atomic step).

        Named as kombu names them (milliseconds of the monotonic clock first), so the queue keeps its order."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + PARTIAL_SUFFIX
        try:
            with open(partial, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
