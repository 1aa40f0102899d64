"""A worker's address: ``specscope://HOST:PORT/?token=TOKEN`` (IPv6 hosts in brackets).

The token is a secret: :meth:`WorkerAddress.redacted` is what goes into a trace, a log or an error sentence;
only :meth:`WorkerAddress.url` (printed once by ``specscope serve``) carries it.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, quote

SCHEME = "specscope"
MAX_URL_CHARS = 2048
_HOST_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_\-]{1,256}$")  # secrets.token_urlsafe's alphabet


class BadWorkerUrl(ValueError):
    """The text is not a worker URL; ``str(e)`` is one sentence saying why."""


@dataclass(frozen=True)
class WorkerAddress:
    host: str  # a name, an IPv4 address or a bare IPv6 address (no brackets)
    port: int
    token: str = field(default="", repr=False)  # "" when the URL has none: the worker refuses such a client

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def url(self) -> str:
        """The whole URL, token included: for the one line ``serve`` prints, never for a log."""
        query = f"?token={quote(self.token, safe='')}" if self.token else ""
        return f"{SCHEME}://{self.netloc}/{query}"

    def redacted(self) -> str:
        """The URL without its token: what a trace, an autosave or a message may say."""
        return f"{SCHEME}://{self.netloc}/"

    def __str__(self) -> str:  # an address printed by accident never shows the token
        return self.redacted()


def _host(text: str) -> str:
    if text.startswith("["):
        if not text.endswith("]"):
            raise BadWorkerUrl("the worker URL's IPv6 host has no closing bracket")
        inner = text[1:-1]
        try:
            return str(ipaddress.IPv6Address(inner.split("%", 1)[0])) + (
                "%" + inner.split("%", 1)[1] if "%" in inner else "")
        except ValueError:
            raise BadWorkerUrl(f"the worker URL's host [{inner}] is not an IPv6 address") from None
    if ":" in text:
        raise BadWorkerUrl("the worker URL's host looks like an IPv6 address: put it in brackets, "
                           "e.g. specscope://[::1]:7777/?token=…")
    if not _HOST_NAME_RE.match(text):
        raise BadWorkerUrl(f"the worker URL's host {text!r} is not a host name or address")
    return text


def parse_worker_url(text: str) -> WorkerAddress:
    """The address in ``text``, or :class:`BadWorkerUrl` with one sentence (which never repeats the token)."""
    text = text.strip()
    if not text:
        raise BadWorkerUrl("the worker URL is empty: give the line `specscope serve` printed")
    if len(text) > MAX_URL_CHARS:
        raise BadWorkerUrl(f"the worker URL is longer than {MAX_URL_CHARS} characters")
    if not text.lower().startswith(SCHEME + "://"):
        raise BadWorkerUrl("a worker URL starts with specscope:// (the line `specscope serve` printed)")
    rest = text[len(SCHEME) + 3:]
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority:
        raise BadWorkerUrl("a worker URL carries no user name: the token goes in ?token=…")
    host_text, port_text = authority, ""
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise BadWorkerUrl("the worker URL's IPv6 host has no closing bracket")
        host_text, after = authority[:close + 1], authority[close + 1:]
        if after and not after.startswith(":"):
            raise BadWorkerUrl("the worker URL has text between its host and its port")
        port_text = after[1:]
    elif ":" in authority:
        host_text, port_text = authority.rsplit(":", 1)
    if not host_text:
        raise BadWorkerUrl("the worker URL has no host")
    host = _host(host_text)
    if not port_text:
        raise BadWorkerUrl("the worker URL has no port (specscope://HOST:PORT/?token=…)")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise BadWorkerUrl(f"the worker URL's port {port_text!r} is not a number from 1 to 65535")
    after_authority = rest[len(authority):].split("#", 1)[0]
    path, _, query = after_authority.partition("?")
    if path not in ("", "/"):
        raise BadWorkerUrl("a worker URL has no path: specscope://HOST:PORT/?token=…")
    params = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(params) - {"token"})
    if unknown:
        raise BadWorkerUrl(f"the worker URL has an unknown parameter {unknown[0]!r} (only token=…)")
    tokens = params.get("token", [])
    if len(tokens) > 1:
        raise BadWorkerUrl("the worker URL gives the token more than once")
    token = tokens[0] if tokens else ""
    if token and not _TOKEN_RE.match(token):
        raise BadWorkerUrl("the worker URL's token holds characters a worker token never has")
    return WorkerAddress(host, int(port_text), token)
