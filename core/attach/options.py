"""What an attach is asked to do, checked before any I/O: the options (``AttachOptions``, ``check_options``) and
the server's URL: its root (``base_url``), the form any message or trace shows (``redact_url``: no
user:password, no query), and the form requested (``request_url``), its credentials sent in a header instead
(``auth_from_url``; the API key comes from the environment, ``api_key_from_env``).

A problem is one sentence (``AttachError``), with any credentials in the URL masked.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    import httpx

API_KEY_VARIABLES = ("SPECSCOPE_API_KEY", "OPENAI_API_KEY")


class AttachError(ValueError):
    """Options that cannot work (a URL that is not http(s), a negative timeout): one sentence."""


MAX_TIMEOUT_S = 24 * 3600.0
MIN_SCRAPE_INTERVAL_S, MAX_SCRAPE_INTERVAL_S = 0.01, 3600.0
MAX_ATTACH_TOKENS = 131_072  # the CLI's --max-new-tokens bound (cli_checks.MAX_NEW_TOKENS)


def check_options(options: AttachOptions) -> None:
    """AttachError (one sentence) for options no request can be made with; before any I/O."""
    base_url(options.url)
    if not options.prompt.strip():
        raise AttachError("the prompt is empty: give some text to continue")
    if not (math.isfinite(options.timeout_s) and 0 < options.timeout_s <= MAX_TIMEOUT_S):
        raise AttachError(f"the timeout must be a finite number of seconds above 0 and at most "
                          f"{MAX_TIMEOUT_S:g}, got {options.timeout_s}")
    if not (math.isfinite(options.scrape_interval_s)
            and MIN_SCRAPE_INTERVAL_S <= options.scrape_interval_s <= MAX_SCRAPE_INTERVAL_S):
        raise AttachError(f"the scrape interval must be a finite number of seconds from {MIN_SCRAPE_INTERVAL_S:g} "
                          f"to {MAX_SCRAPE_INTERVAL_S:g}, got {options.scrape_interval_s}")
    if not (math.isfinite(options.temperature) and options.temperature >= 0):
        raise AttachError(f"the temperature must be a finite number of 0 or more, got {options.temperature}")
    if not 1 <= options.max_tokens <= MAX_ATTACH_TOKENS:
        raise AttachError(f"max tokens must be from 1 to {MAX_ATTACH_TOKENS:,}, got {options.max_tokens:,}")


@dataclass
class AttachOptions:
    url: str
    prompt: str
    model: str | None = None  # None: the first model the server lists
    max_tokens: int = 128
    temperature: float = 0.0
    timeout_s: float = 60.0  # connect and per-read timeout
    scrape_interval_s: float = 0.5
    metrics_path: str = "/metrics"
    extra_body: dict[str, Any] = field(default_factory=dict)  # e.g. {"speculative": false} for a plain run


_USERINFO = re.compile(r"//[^/?#]*@")  # greedy up to the last @ before the path: a password may hold an @


def mask_credentials(text: str) -> str:
    """``text`` with any ``user:password@`` after a ``//`` replaced by ``***@``; works on URLs too broken to
    parse, so that an error message about a bad URL never prints its password."""
    return _USERINFO.sub("//***@", text)


def _without_userinfo(url: str, keep_query: bool) -> str:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # not parseable: say what it was, without credentials or query
        return mask_credentials(url).split("?", 1)[0]
    if ":" in host:  # an IPv6 address keeps its brackets ("http://[::1]:8080")
        host = f"[{host}]"
    if port:
        host = f"{host}:{port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query if keep_query else "", ""))


def redact_url(url: str) -> str:
    """The URL without user:password (and without a query, where tokens are sometimes passed)."""
    return _without_userinfo(url, keep_query=False)


def api_key_from_env() -> str | None:
    for name in API_KEY_VARIABLES:
        value = os.environ.get(name)
        if value:
            return value
    return None


def base_url(url: str) -> str:
    """The server root: a trailing ``/v1`` (as OpenAI clients are often given) is dropped. AttachError (one
    sentence, credentials masked) for anything that is not a usable http(s) URL."""
    shown = repr(mask_credentials(url))
    if not url.strip():
        raise AttachError("the server URL is empty: give one such as http://127.0.0.1:8080")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise AttachError(f"the URL {shown} holds a space or a control character: URLs cannot (write a space as %20)")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL": an unclosed bracket
        raise AttachError(f"{shown} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AttachError(f"{shown} is not an http:// or https:// URL")
    try:
        port = parts.port
    except ValueError:  # "Port out of range 0-65535", "Port could not be cast to integer value"
        port = 0
    if port == 0:
        raise AttachError(f"the port in {shown} must be a whole number from 1 to 65535")
    import httpx  # here, not at the top: the CLI's --help reads this module's limits without the HTTP client

    try:
        httpx.URL(url)  # what the client will parse: refuse here what it would refuse later
    except (httpx.InvalidURL, ValueError) as exc:
        raise AttachError(f"{shown} is not a valid URL ({mask_credentials(str(exc))})") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def auth_from_url(url: str) -> httpx.BasicAuth | None:
    import httpx

    parts = urlsplit(url)
    if parts.username:
        return httpx.BasicAuth(parts.username, parts.password or "")
    return None


def request_url(url: str) -> str:
    """The URL to request: credentials go in the auth header instead; the query stays."""
    return _without_userinfo(url, keep_query=True)
