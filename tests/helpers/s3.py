"""What the store tests need of the S3-compatible test server: a free port, and a bucket's description."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Bucket:
    """A fresh bucket on the test S3 server: ``url`` is ``s3://NAME``, ``client`` a boto3 client for it."""

    name: str
    url: str
    endpoint: str
    client: Any
