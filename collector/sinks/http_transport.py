"""How the HTTP sink reaches the server: HTTPS with a private CA, and no token in clear text.

A host's ingest token is a bearer credential: whoever reads it off the wire can
write records as that host. So a sink refuses a plain ``http://`` server that is
not on this machine (``localhost``, a loopback address, or an address of one of
its interfaces) unless the caller says
``insecure=True`` (``--insecure``): the mistake is caught before the first request,
with a message that says what to do. ``--insecure`` only allows plain HTTP; it never
turns certificate checks off (a private CA is given with ``--ca-file``).

``unix:PATH`` ships over a Unix socket on this machine instead (``nettrail up``'s local
collector): the server's account is checked with SO_PEERCRED before any request
(collector/sinks/unix_peer.py; ``--server-user``, default ``nettrail``).

Used by collector/sinks/http.py and the ``--server`` flags of ``nettrail collect``
and ``nettrail analyze``. Keep in sync with docs/collector-sinks.md (TLS) and
docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from collector.sinks.unix_url import check_socket_url, server_uid, socket_path


class InsecureServerError(ValueError):
    """The token would cross the network in clear text and nobody said that is fine."""


def add_transport_arguments(parser: Any) -> None:
    """--ca-file and --insecure on a parser or argument group (beside --server)."""
    parser.add_argument(
        "--ca-file",
        metavar="PATH",
        help="--server https://...: trust the CA certificate(s) in PATH (PEM) instead of the system's",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="allow --server http://... to another machine: the token crosses the network in clear text",
    )
    parser.add_argument(
        "--server-user",
        metavar="USER",
        help="--server unix:PATH: the account the webapp runs as (checked before sending; default nettrail)",
    )


def transport_options(args: argparse.Namespace) -> dict[str, Any]:
    """The HttpSink keyword arguments the flags ask for."""
    return {
        "ca_file": getattr(args, "ca_file", None),
        "insecure": bool(getattr(args, "insecure", False)),
        "server_user": getattr(args, "server_user", None),
    }


def is_loopback_host(host: str) -> bool:
    """`localhost`, or an address of this machine (loopback, unspecified, or one of its
    interfaces' -- `nettrail up --host 192.0.2.5` ships to itself): traffic that never
    leaves the machine.

    A name is not resolved: what it resolves to can change between this check and
    the request, so only the one name the resolver must keep local counts.
    """
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if address.is_loopback or address.is_unspecified:
        return True
    # The kernel lets a socket bind only to an address of this machine. (socket is imported
    # here: `nettrail analyze` imports this module for its --server flags and rarely sends.)
    import socket

    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


def check_server_url(
    url: str, *, insecure: bool = False, ca_file: str | Path | None = None, server_user: str | None = None
) -> None:
    """ValueError (InsecureServerError for plain HTTP) when the sink must not send to `url`."""
    if socket_path(url) is not None:
        check_socket_url(url)
        server_uid(server_user)  # an unknown account is said now
        if ca_file is not None:
            raise ValueError(f"--ca-file is for an https:// server, not {url}")
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--server {url}: give an http:// or https:// URL with a host name, or unix:PATH")
    if ca_file is not None:
        if parts.scheme != "https":
            raise ValueError(f"--ca-file is for an https:// server, not {url}")
        if not Path(ca_file).is_file():
            raise ValueError(f"--ca-file {ca_file}: no such file")
    if parts.scheme == "http" and not insecure and not is_loopback_host(parts.hostname):
        raise InsecureServerError(
            f"--server {url}: refusing to send the host's token over plain HTTP to another machine; "
            "use https:// (with --ca-file for a private CA), or --insecure to send it in clear text anyway"
        )
