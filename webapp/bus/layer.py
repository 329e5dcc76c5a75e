"""channels_redis's layer, with a ``receive`` that waits out a Redis restart instead of failing.

channels_redis lets a connection error out of ``receive``; Channels then ends the
consumer and daphne closes every live websocket of the worker with 1011, although
Redis is back a second later. Here ``receive`` retries (every RETRY seconds) until
Redis answers again, so a browser keeps its feed; and a channel holds CAPACITY
messages instead of 100. Messages sent while Redis was
down were never accepted: the writer keeps that batch pending and pushes it again
(webapp/bus/writer.py). Chosen by env.py for every ``redis://`` channel layer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels_redis.core import RedisChannelLayer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)
RETRY = 0.5  # seconds between attempts while Redis is unreachable
# channels_redis keeps at most `capacity` messages per channel, in Redis and in the
# worker's receive buffer, and drops the excess silently (the oldest, in the buffer).
# Its default of 100 lost live records when a busy worker fell behind for a moment
# (tests/test_scale_out.py); the live consumer bounds what it holds itself
# (NETTRAIL_LIVE_MAX_BUFFER records, then it drops the client visibly).
CAPACITY = 1000  # messages of at most push.CHUNK records
EXPIRY = 120  # seconds a message waits in a channel (default 60)


class ResilientRedisChannelLayer(RedisChannelLayer):
    def __init__(self, *args: Any, capacity: int = CAPACITY, expiry: int = EXPIRY, **kwargs: Any) -> None:
        super().__init__(*args, capacity=capacity, expiry=expiry, **kwargs)

    async def receive(self, channel: str) -> Any:
        while True:
            try:
                return await super().receive(channel)
            except (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError) as exc:
                log.warning("channel layer: Redis unreachable (%s); retrying", exc)
                await asyncio.sleep(RETRY)
