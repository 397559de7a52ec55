"""``make run``'s filesystem broker hands a consumer whole messages only (core.broker): kombu's own transport
let a worker read a message its publisher had created but not written yet, and the worker died of it."""

from __future__ import annotations

import os
from queue import Empty

import pytest
from kombu import Connection

import portal.celery  # noqa: F401 — every Slipway process loads the Celery app, which maps the scheme
from core import broker


@pytest.fixture
def connection(tmp_path):
    folders = {name: tmp_path / name for name in ("queue", "processed", "control")}
    for folder in folders.values():
        folder.mkdir()
    options = {"data_folder_in": str(folders["queue"]), "data_folder_out": str(folders["queue"]),
               "processed_folder": str(folders["processed"]), "control_folder": str(folders["control"]),
               "store_processed": False}
    with Connection("filesystem://localhost//", transport_options=options) as conn:
        yield conn, folders["queue"]


def test_the_filesystem_scheme_is_the_transport_that_writes_whole_messages(connection):
    conn, _queue = connection
    assert isinstance(conn.transport, broker.Transport)


def test_a_message_being_written_is_not_taken_and_arrives_whole(connection, monkeypatch):
    conn, folder = connection
    queue = conn.SimpleQueue("default")
    seen_while_writing = []
    real_replace = os.replace

    def replace(source, target):
        # The moment kombu's transport lost messages in: the file exists, the message is not in the queue yet.
        seen_while_writing.append((sorted(p.name for p in folder.iterdir()), _take(conn)))
        real_replace(source, target)

    monkeypatch.setattr(broker.os, "replace", replace)
    queue.put({"task": "reconcile", "args": [1, 2]})
    [(files, taken)] = seen_while_writing
    assert len(files) == 1 and files[0].endswith(".default.msg" + broker.PARTIAL_SUFFIX)
    assert taken is None  # a consumer finds nothing to take rather than an empty message
    message = queue.get(timeout=1)
    assert message.payload == {"task": "reconcile", "args": [1, 2]}
    message.ack()
    assert list(folder.iterdir()) == []
    queue.close()


def _take(conn):
    """What a consumer on another channel takes from the queue now (None: nothing)."""
    channel = conn.channel()
    try:
        return channel._get("default")
    except Empty:
        return None
    finally:
        channel.close()
