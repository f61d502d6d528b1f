"""Which hosts are this machine: the rule every guard that keeps a local default (a stack
password, the stack's S3 key, an unauthenticated listener) on loopback applies."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback IP literal (another name may resolve
    anywhere: ``127.example.com`` is not this machine)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_url(url: str | None) -> bool:
    """Whether ``url``'s host is this machine (``is_loopback``); False without a URL."""
    if url is None:
        return False
    return is_loopback(urlsplit(url).hostname or "")
