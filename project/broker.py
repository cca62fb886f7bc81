"""The embedded broker of `make run`: kombu's filesystem transport, made safe.

kombu's filesystem transport creates a message file, then writes it. A
consumer polling the folder in between moves away the empty file and fails
to decode it (`JSONDecodeError`), which Celery treats as unrecoverable: the
`make run` worker died within a minute of starting. Here a message is written
under a name no consumer looks at and renamed into place, and a rename is
atomic, so a consumer sees a whole message or none.

Registered under the `filesystem` alias (so `CELERY_BROKER_URL=filesystem://`,
the embedded default, uses it) by importing this module, which
`project/celery.py` does before any connection is made.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from time import monotonic
from typing import Any

from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    """A filesystem channel whose messages appear in the folder whole."""

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # A leading dot: `_get` and `_purge` match `<stamp>.<queue>.msg` on
        # the part after the first dot, which a partial file never has.
        partial = os.path.join(self.data_folder_out, f".{uuid.uuid4()}.partial")
        try:
            with open(partial, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
            raise filesystem.ChannelError(
                f"Cannot add file {final!r} to directory"
            ) from exc


class Transport(filesystem.Transport):
    Channel = Channel


TRANSPORT_ALIASES["filesystem"] = f"{__name__}:Transport"
