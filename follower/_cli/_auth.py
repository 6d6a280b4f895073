"""``follower follow``'s credentials: extra headers, a bearer token, the URL's user info, a CA.

Self-contained, so the parser and the command each take it in one line. Header
values come from ``--header 'Name: value'`` (repeatable), the
``FOLLOWER_BEARER_TOKEN`` variable (``Authorization: Bearer ...``, kept out of the
process list) and the agent URL's user info (``http://user:password@host/``: taken
out of the URL and sent as ``Authorization: Basic ...``, so no URL the command
prints, logs or stores holds it); a CA bundle from ``--ca-bundle`` or
``FOLLOWER_CA_BUNDLE``. No value is ever echoed: not in ``--help``, not in an
error, not in a log line (an agent that echoes one is scrubbed,
:mod:`follower._redact`), and not in what is stored (``task.json`` holds the
endpoint only).
"""

from __future__ import annotations

import argparse
import base64
import os
import ssl
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

import anyio.to_thread

from .._errors import InvalidArgumentError
from .._http._clients import ClientPool
from .._options import RequestHeaders, request_headers

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    import httpx

BEARER_TOKEN_VARIABLE = "FOLLOWER_BEARER_TOKEN"
CA_BUNDLE_VARIABLE = "FOLLOWER_CA_BUNDLE"


def add_credential_arguments(command: argparse.ArgumentParser) -> None:
    """``--header`` and ``--ca-bundle``, whose defaults are never shown."""
    command.add_argument(
        "--header",
        dest="headers",
        action="append",
        default=[],
        type=_header,
        metavar="'NAME: VALUE'",
        help="send this header with every request to the agent (repeatable); a bearer "
        f"token is better set in {BEARER_TOKEN_VARIABLE}, which sends "
        "'Authorization: Bearer <token>' and stays out of the process list",
    )
    command.add_argument(
        "--ca-bundle",
        default=None,
        metavar="PATH",
        help="trust the CA certificates in this PEM file for https agents, instead of "
        f"the system's (default: ${CA_BUNDLE_VARIABLE}, if set)",
    )


class AgentUrl(argparse.Action):
    """Keeps the agent's URL without its user info; the user info apart, to send as basic auth.

    httpx would send a URL's user info as basic auth too, but the URL would then
    be printed whole in every message that names the agent.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(values, str)
        parts = urlsplit(values)
        user_info, at, host = parts.netloc.rpartition("@")
        credentials = None
        if at:
            user, _, password = user_info.partition(":")
            credentials = f"{unquote(user)}:{unquote(password)}"
            values = urlunsplit(parts._replace(netloc=host))
        setattr(namespace, self.dest, values)
        namespace.url_credentials = credentials


def _header(text: str) -> tuple[str, str]:
    name, colon, value = text.partition(":")
    if not colon:
        raise argparse.ArgumentTypeError("a header is 'NAME: VALUE' (no ':' found)")
    try:
        [checked] = request_headers("--header", [(name.strip(), value)])
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return checked


def headers_of(args: argparse.Namespace) -> RequestHeaders:
    """The headers the command line, the environment and the agent URL's user info ask for."""
    headers = list(args.headers)
    token = os.environ.get(BEARER_TOKEN_VARIABLE, "").strip()
    if token:
        headers.append(("Authorization", f"Bearer {token}"))
    credentials = getattr(args, "url_credentials", None)
    if credentials is not None:
        if any(name.lower() == "authorization" for name, _ in headers):
            raise InvalidArgumentError(
                "the agent's URL carries credentials (user info) and an Authorization "
                f"header is given too (--header or {BEARER_TOKEN_VARIABLE}): give them once"
            )
        basic = base64.b64encode(credentials.encode()).decode("ascii")
        headers.append(("Authorization", f"Basic {basic}"))
    return request_headers(BEARER_TOKEN_VARIABLE if token else "--header", headers)


@asynccontextmanager
async def agent_client(args: argparse.Namespace) -> AsyncIterator[httpx.AsyncClient | None]:
    """A client trusting ``--ca-bundle``'s CAs, or None: the loop's shared clients."""
    path = args.ca_bundle or os.environ.get(CA_BUNDLE_VARIABLE) or None
    if path is None:
        yield None
        return
    try:
        context = await anyio.to_thread.run_sync(partial(ssl.create_default_context, cafile=path))
    except (OSError, ssl.SSLError) as exc:
        raise InvalidArgumentError(
            f"--ca-bundle {path}: not a readable PEM file of CA certificates ({type(exc).__name__})"
        ) from None
    async with ClientPool(ssl_context=context).lease() as client:
        yield client
