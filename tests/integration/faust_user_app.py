"""A team's own Faust app, as README.md shows one: an agent of its own, and the dedup worker mounted.

The agent reads ``ECHO_IN`` and sends every value, upper-cased, to ``ECHO_OUT``. The app runs as a user runs it:
``faust -A tests.integration.faust_user_app worker``. The dedup worker's settings come from the environment
(``STREAMDEDUP_*``).
"""

from __future__ import annotations

import os

import faust

from streamdedup.faust import mount

app = faust.App(
    os.environ["ECHO_APP_ID"],
    broker=os.environ["STREAMDEDUP_BROKER"],
    topic_replication_factor=1,
    autodiscover=False,
)
requests = app.topic(os.environ["ECHO_IN"], key_type=bytes, value_type=bytes, value_serializer="raw")
replies = app.topic(os.environ["ECHO_OUT"], key_type=bytes, value_type=bytes, value_serializer="raw")


@app.agent(requests)
async def echo(stream: faust.StreamT[bytes]) -> None:
    """Send each value to the replies topic, upper-cased, under its key."""
    async for key, value in stream.items():
        await replies.send(key=key, value=value.upper())


mount(app)
