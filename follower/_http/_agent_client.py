"""The library's httpx client, with shorter paths than httpx's where nothing needs the long ones.

A follower's read is a few tens of microseconds of HTTP, and httpx's client
layer (building the request, the auth and redirect loops) cost more than that.
:class:`AgentClient` gives the same request and response by shorter paths, and
those lean on private members of ``httpx.AsyncClient``. They are fenced: each is
checked when a client is made, and a client whose httpx lacks one, or has it in
another shape, takes httpx's public path throughout (``build_request``,
``send``). The supported httpx range is pyproject's; ``tools/httpx-lowest`` runs
the transport's tests on its lowest release.
"""

from __future__ import annotations

import enum
import inspect
import json
from typing import TYPE_CHECKING, Any, final

import attrs
import httpx

from ._transport import AgentTransport

if TYPE_CHECKING:
    from ._body import ResponseBody
    from ._head import ResponseHead

# The private methods of httpx.AsyncClient the shorter send calls, with the parameters
# it calls them with (so in httpx 0.28; 0.27 has no _set_timeout, and sends by httpx's).
_PRIVATE_METHODS = {
    "_set_timeout": ("self", "request"),
    "_send_single_request": ("self", "request"),
    "_build_redirect_request": ("self", "request", "response"),
}
# ... and the private attributes of a client it reads or replaces: its state (an
# enum with OPENED), its auth and event hooks (read as such: the public properties
# would cost the send three calls), its cookies (an httpx.Cookies), and its mounts
# (a dict: a JSON request skips httpx's models only where no mount, nor a proxy, applies).
PRIVATE_MEMBERS = (*_PRIVATE_METHODS, "_state", "_auth", "_event_hooks", "_cookies", "_mounts")


def _private_methods_fit() -> bool:
    """Whether httpx.AsyncClient has each private method the shorter send calls, as called."""
    for name, parameters in _PRIVATE_METHODS.items():
        method = inspect.getattr_static(httpx.AsyncClient, name, None)
        if not inspect.isfunction(method):
            return False
        if tuple(inspect.signature(method).parameters) != parameters:
            return False
    return inspect.iscoroutinefunction(httpx.AsyncClient._send_single_request)


# Not attrs: an httpx.AsyncClient, made by httpx's own __init__.
@final
class AgentClient(httpx.AsyncClient):
    """An httpx client on an :class:`AgentTransport`: each exchange is bounded as a whole.

    Callers that bound an exchange themselves (with trace hooks, as httpcore's
    pool wait must be told from the read) can skip that on this client.

    A follower's read is a few tens of microseconds of HTTP, and httpx's client
    layer (building the request, the auth and redirect loops) cost more than
    that. So :meth:`build_json_request` and :meth:`send` take shorter paths that
    give the same request and response wherever nothing needs the long ones:
    client headers, cookies, auth and event hooks apply as on any client.
    Where the installed httpx lacks a private member those paths use (see the
    module's docstring), the client takes httpx's own.
    """

    def __init__(self, transport: AgentTransport, **kwargs: Any) -> None:
        super().__init__(transport=transport, **kwargs)
        state = getattr(self, "_state", None)
        hooks = getattr(self, "_event_hooks", None)
        # Decided once: the fence costs the send one attribute read.
        self._short_send = (
            isinstance(state, enum.Enum)
            and hasattr(type(state), "OPENED")
            and hasattr(self, "_auth")
            and isinstance(hooks, dict)
            and {"request", "response"} <= hooks.keys()
            and _private_methods_fit()
        )
        # httpx extracts cookies from every response through http.cookiejar, about
        # a tenth of a small read; agents rarely set any, so skip it when none is set.
        cookies = getattr(self, "_cookies", None)
        if type(cookies) is httpx.Cookies:
            self._cookies = _CookiesWhenSet(cookies)
        # By the identity of the request's headers (each a dict kept by its caller):
        # followers that send headers of their own share the client with those that don't.
        self._merged: dict[int, tuple[object, list[tuple[bytes, bytes]], Merged]] = {}
        # JSON requests may skip httpx's models altogether (json_exchange), on the
        # library's own transport (a test may give another) where httpx would send every
        # request to it: no mount, and so no proxy (httpx mounts one for a proxy).
        mounts = getattr(self, "_mounts", None)
        self._bytes_transport = (
            transport
            if self._short_send
            and _JSON is not None
            and isinstance(transport, AgentTransport)
            and type(mounts) is dict
            and not mounts
            else None
        )

    def merged_for_json(self, url: httpx.URL, headers: dict[str, str]) -> Merged | None:
        """The request's fields if a JSON request to ``url`` may go by :meth:`json_exchange`.

        It may when nothing of the client applies to it but its headers: no auth,
        cookie, param or event hook, an absolute URL without credentials, no
        client-wide ``Content-Length``. None otherwise: httpx's path then.
        """
        if (
            self._bytes_transport is None
            or self._auth is not None
            or self._event_hooks["request"]
            or self._event_hooks["response"]
            or self.is_closed
            or self.cookies
            or self.params
            or url.is_relative_url
            or url.userinfo
        ):
            return None
        merged = self._merged_headers(headers)
        return None if merged.content_length else merged

    async def json_exchange(
        self,
        method: str,
        url: httpx.URL,
        json_body: Any,
        merged: Merged,
        *,
        deadline: float,
    ) -> tuple[ResponseHead, ResponseBody]:
        """Send a JSON request straight to the transport: its head, and its body to read.

        The bytes sent are those of ``build_json_request`` and ``send`` (``merged``
        from :meth:`merged_for_json`); none of httpx's models is made. What
        httpx would do to the response here is done too: a ``Set-Cookie`` goes
        into the client's cookies. The whole exchange is bounded by ``deadline``.
        """
        transport = self._bytes_transport
        assert transport is not None
        assert _JSON is not None
        self._state = type(self._state).OPENED  # as httpx's send: no `async with` after
        body = _JSON.encode(json_body).encode("utf-8")
        head, response_body = await transport.send_bytes(
            url,
            method.encode("ascii"),
            merged.raw_for_body(url.netloc, len(body)),
            body,
            deadline=deadline,
        )
        if any(name.lower() == b"set-cookie" for name, _ in head.headers):
            # Rare (agents seldom set cookies): httpx's own extraction, on its models.
            try:
                request = httpx.Request(method, url)
                self.cookies.extract_cookies(
                    httpx.Response(head.status, headers=head.headers, request=request)
                )
            except BaseException:
                await response_body.aclose()  # the connection goes, not back to the stack
                raise
        return head, response_body

    def build_json_request(
        self,
        method: str,
        url: httpx.URL,
        json_body: Any,
        *,
        headers: dict[str, str],
        timeout: httpx.Timeout,
    ) -> httpx.Request:
        """``build_request(method, url, json=json_body, headers=..., timeout=...)``, cheaper.

        The same request, field for field and in the same order: the client's
        headers merged with ``headers``, then ``Host`` in front and the body's
        ``Content-Length`` and ``Content-Type`` behind, unless already there. Where
        the client holds cookies or params, or the URL is relative, httpx builds it; so
        too where no encoder of ours sends what httpx's ``json=`` sends.
        """
        if _JSON is None or self.cookies or self.params or url.is_relative_url:
            return self.build_request(method, url, json=json_body, headers=headers, timeout=timeout)
        merged = self._merged_headers(headers)
        if merged.content_length:  # a client-wide Content-Length: httpx's to honour
            return self.build_request(method, url, json=json_body, headers=headers, timeout=timeout)
        body = _JSON.encode(json_body).encode("utf-8")
        request = httpx.Request(
            method,
            url,
            headers=merged.for_body(url.netloc, len(body)),
            stream=httpx.ByteStream(body),
            extensions={"timeout": timeout.as_dict()},
        )
        request.read()  # as for json=: the body is there to read again
        return request

    def _merged_headers(self, headers: dict[str, str]) -> Merged:
        # Merged as httpx merges them (the request's replace the client's, at the
        # end), once for as long as the client's headers stay the same.
        current = self.headers.raw
        cached = self._merged.get(id(headers))
        if cached is not None and cached[0] is headers and cached[1] == current:
            return cached[2]
        merged_headers = httpx.Headers(self.headers)
        merged_headers.update(headers)
        merged = Merged(
            merged_headers.raw,
            host="host" in merged_headers,
            content_length="content-length" in merged_headers
            or "transfer-encoding" in merged_headers,
            content_type="content-type" in merged_headers,
        )
        if len(self._merged) >= _BUILT_HEADERS_MAX:
            self._merged.clear()
        self._merged[id(headers)] = (headers, current, merged)  # holds it: its id stays its
        return merged

    async def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: Any = httpx.USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        """httpx's ``send``; straight to the transport when no auth, hook or redirect applies.

        httpx's auth and redirect loops (an async generator and two coroutines a
        request) do nothing then; what they would set on the response is set here.
        """
        if (
            not self._short_send
            or auth is not httpx.USE_CLIENT_DEFAULT
            or self._auth is not None
            or (
                self.follow_redirects
                if follow_redirects is httpx.USE_CLIENT_DEFAULT
                else follow_redirects
            )
            or self._event_hooks["request"]
            or self._event_hooks["response"]
            or self.is_closed
            or request.url.userinfo  # httpx turns it into basic auth
        ):
            return await super().send(
                request, stream=stream, auth=auth, follow_redirects=follow_redirects
            )
        self._state = type(self._state).OPENED  # as httpx's send: no `async with` after
        self._set_timeout(request)
        response = await self._send_single_request(request)
        try:
            response.history = []
            if response.has_redirect_location:
                response.next_request = self._build_redirect_request(request, response)
            if not stream:
                await response.aread()
        except BaseException:
            await response.aclose()
            raise
        return response


@attrs.define
class Merged:
    """A client's headers merged with a request's, and which of the body's are set."""

    fields: list[tuple[bytes, bytes]]
    host: bool
    content_length: bool
    content_type: bool
    # Whole field lists by (host, body length): a follower's bodies come in a few
    # lengths, and copying an httpx.Headers skips checking every field again.
    _built: dict[tuple[bytes, int], tuple[httpx.Headers, list[tuple[bytes, bytes]]]] = attrs.field(
        factory=dict
    )

    def for_body(self, netloc: bytes, length: int) -> httpx.Headers:
        """A request's fields for a JSON body of ``length`` bytes, as httpx orders them."""
        return self._for_body(netloc, length)[0]

    def raw_for_body(self, netloc: bytes, length: int) -> list[tuple[bytes, bytes]]:
        """The same fields, as sent (``httpx.Headers.raw``)."""
        return self._for_body(netloc, length)[1]

    def _for_body(
        self, netloc: bytes, length: int
    ) -> tuple[httpx.Headers, list[tuple[bytes, bytes]]]:
        built = self._built.get((netloc, length))
        if built is None:
            fields = [(b"Host", netloc), *self.fields] if not self.host else [*self.fields]
            fields.append((b"Content-Length", str(length).encode("ascii")))
            if not self.content_type:
                fields.append((b"Content-Type", b"application/json"))
            if len(self._built) >= _BUILT_HEADERS_MAX:
                self._built.clear()
            headers = httpx.Headers(fields)
            built = self._built[netloc, length] = (headers, headers.raw)
        return built


_BUILT_HEADERS_MAX = 64


# The bytes httpx's json= sends, from one encoder reused. Its options are httpx's
# own and changed between releases (0.28: compact, UTF-8, no NaN; 0.27: json.dumps'
# defaults), so the one giving the installed httpx's bytes is taken; with neither,
# httpx builds every JSON request itself.
_JSON_ENCODERS = (
    json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False),
    json.JSONEncoder(),
)
_JSON_PROBE = {"a": [1, 2.5, None, True, {"b": "c"}], "\u00e9": "\u00fc\U0001f600"}


def encoder_like_httpx() -> json.JSONEncoder | None:
    """The encoder of :data:`_JSON_ENCODERS` that sends what httpx's ``json=`` sends."""
    sent = httpx.Request("POST", "http://probe.invalid/", json=_JSON_PROBE).content
    try:
        httpx.Request("POST", "http://probe.invalid/", json=float("nan"))
    except ValueError:
        nan_allowed = False
    else:
        nan_allowed = True
    for encoder in _JSON_ENCODERS:
        if encoder.allow_nan == nan_allowed and encoder.encode(_JSON_PROBE).encode() == sent:
            return encoder
    return None


_JSON = encoder_like_httpx()


class _CookiesWhenSet(httpx.Cookies):
    """httpx's cookies, extracted only from responses that set some."""

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)
