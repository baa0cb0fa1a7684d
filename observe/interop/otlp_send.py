"""OTLP as receivers take it: the traces as binary protobuf, and a POST to an OTLP/HTTP receiver.

``otlp_protobuf`` turns the OTLP/JSON document ``otlp_traces`` makes into an
``ExportTraceServiceRequest`` with opentelemetry-proto's own classes (strictly: a
field they do not define is an error) and serialises it. OTLP/JSON writes trace
and span ids as hex, the spec's exception to the protobuf JSON mapping, whose
parser wants base64 for bytes: the ids are converted on the way in, as any
OTLP/JSON receiver does. opentelemetry-proto (and protobuf) are imported only
here, lazily: the ``otlp`` extra installs them.

``post`` sends one request body to an OTLP/HTTP traces endpoint and reads the
receiver's answer: a status other than 2xx, a refused connection or a partial
success that rejected spans is ``output-write``. Redirects are not followed.
"""

from __future__ import annotations

import base64
import copy
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from observe.refusals import OutputWrite

__all__ = [
    "CONTENT_TYPES",
    "MissingProtobuf",
    "otlp_protobuf",
    "post",
    "require_protobuf",
    "traces_url",
]

#: The Content-Type of each body ``post`` sends, by export format.
CONTENT_TYPES = {"otlp": "application/json", "otlp-proto": "application/x-protobuf"}
_TIMEOUT_S = 30.0
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class MissingProtobuf(Exception):
    """opentelemetry-proto is not installed: binary OTLP cannot be made."""


def require_protobuf() -> None:
    """``MissingProtobuf`` (saying how to install it) unless opentelemetry-proto imports."""
    try:
        import google.protobuf.json_format  # noqa: F401
        import opentelemetry.proto.collector.trace.v1.trace_service_pb2  # noqa: F401
    except ImportError as exc:
        from observe.util.install import install_hint

        raise MissingProtobuf(
            f"binary OTLP needs opentelemetry-proto ({exc.msg}); install it with: {install_hint('otlp')}"
        ) from None


def otlp_protobuf(doc: dict[str, Any]) -> bytes:
    """``doc`` (OTLP/JSON, as ``otlp_traces`` makes it) as a serialised ``ExportTraceServiceRequest``."""
    require_protobuf()
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    mapped = copy.deepcopy(doc)
    for rs in mapped.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for k in _ID_FIELDS:
                    if k in span:
                        span[k] = base64.b64encode(bytes.fromhex(span[k])).decode("ascii")
    req = ExportTraceServiceRequest()
    json_format.ParseDict(mapped, req)
    data: bytes = req.SerializeToString(deterministic=True)
    return data


def traces_url(endpoint: str) -> str:
    """The URL to POST to: ``endpoint`` as given, or with ``/v1/traces`` when it names no path.

    ``ValueError`` for a URL that is not http(s) with a host.
    """
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{endpoint!r} is not an http(s) URL with a host")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urllib.parse.urlunsplit(parts)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is then raised as an HTTPError: refused below


def _rejected(body: bytes, content_type: str) -> tuple[int, str]:
    """The partial success an ``ExportTraceServiceResponse`` reports: (rejected spans, message)."""
    if not body:
        return 0, ""
    if content_type == CONTENT_TYPES["otlp"]:
        import json

        try:
            partial = json.loads(body).get("partialSuccess") or {}
            return int(partial.get("rejectedSpans") or 0), str(partial.get("errorMessage") or "")
        except (ValueError, AttributeError, TypeError):
            return 0, ""
    try:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        resp = ExportTraceServiceResponse.FromString(body)
    except Exception:  # noqa: BLE001 - a receiver that answers 2xx with another body accepted it
        return 0, ""
    return resp.partial_success.rejected_spans, resp.partial_success.error_message


def post(url: str, body: bytes, content_type: str, timeout: float = _TIMEOUT_S) -> str:
    """POST ``body`` to ``url``; the receiver's answer as a note, ``output-write`` unless it accepted every span."""
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=timeout) as resp:
            status, answer = resp.status, resp.read(1 << 20)
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace").strip()
        raise OutputWrite(f"POST {url}: HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else "")) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise OutputWrite(f"POST {url}: {reason}") from None
    rejected, message = _rejected(answer, content_type)
    if rejected:
        raise OutputWrite(f"POST {url}: the receiver rejected {rejected} spans" + (f": {message}" if message else ""))
    return f"POST {url}: HTTP {status}, {len(body)} bytes accepted"
