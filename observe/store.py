"""A content-addressed store of sealed streams: push one off the runner, fetch it anywhere.

A stream is stored under its own digest, ``STORE/<BLAKE3 of the file>.aos``, so a
name says exactly which bytes it holds: pushing the same file twice stores it
once, and a different file can never take its place. Stores (docs/STORE.md):

- a local folder, given as a path or a ``file://`` URL (default ``./aos-store/``);
- S3-compatible object storage, ``s3://BUCKET/PREFIX``, through boto3 (imported
  only when used), with the endpoint and credentials of the standard AWS
  variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...).

:func:`push` verifies the stream (``aos.verify``) before anything is stored and
hashes the bytes it actually sends, so an object never holds other bytes than
the ones verified. :func:`fetch` downloads into a temporary file beside its
target, checks the BLAKE3 of what arrived against the name (``stream-digest``)
and verifies it, and only then renames it into place: a half-written, altered
or unverified file is never left at the target. Both stream the bytes (S3
multipart in both directions); memory stays bounded whatever the file's size.

Each push appends the stream's row to the store's evidence index
(``observe.store_index``, docs/FORMAT.md section 8) under ``STORE/index/``.

Refusals: the stream's own (``stream-missing``, ``stream-chain``, ...),
``stream-digest`` (bytes that are not what their name says), ``store-url`` (not
a store, or not the URL of a stored stream), ``store-unreachable`` (cannot
connect, no credentials, access denied, no such bucket), ``stream-write`` (the
target cannot be written).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aos.refusals import Refusal, StreamMissing, StreamWrite
from observe.env import StoreVars
from observe.refusals import StoreUnreachable, StoreUrl, StreamDigest

if TYPE_CHECKING:
    from aos.signing import Verifier

__all__ = [
    "DEFAULT_STORE",
    "fetch",
    "is_store_url",
    "open_store",
    "push",
]

#: Where ``push`` stores when no store is named (relative to the working directory).
DEFAULT_STORE = "aos-store"

#: S3 transfers: part size and how many parts are in flight (and so in memory, on upload) at once.
PART_SIZE = 8 * 1024 * 1024
CONCURRENCY = 8

_COPY_CHUNK = 8 * 1024 * 1024
_NAME = re.compile(r"^([0-9a-f]{64})\.aos$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def is_store_url(text: str | os.PathLike[str]) -> bool:
    """True for ``s3://`` and ``file://`` URLs (what ``attach`` fetches instead of reading a path)."""
    return isinstance(text, str) and text.startswith(("s3://", "file://"))


# -- the two kinds of store -----------------------------------------------------------------


class _Folder:
    """A local folder: objects are read-only files, written by an atomic rename."""

    def __init__(self, root: Path) -> None:
        self.root = root.absolute()

    def url(self, name: str) -> str:
        return (self.root / name).as_uri()

    def local_path(self, name: str) -> Path | None:
        """Where an object lies on this machine."""
        return self.root / name

    def put(self, fd: int, name: str, digest: str) -> None:
        final = self.root / name
        with contextlib.suppress(OSError, Refusal):
            if _file_digest(final) == digest:
                return  # already stored: content-addressed, nothing to do
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp_fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{name}.", suffix=".part")
        except OSError as exc:
            raise StoreUnreachable(f"{self.root}: cannot write to the store: {exc.strerror or exc}") from exc
        try:
            try:
                with os.fdopen(tmp_fd, "wb") as out:
                    size = _copy(fd, out)
                    os.fsync(out.fileno())
            except OSError as exc:
                raise StoreUnreachable(f"{self.root}: cannot write to the store: {exc.strerror or exc}") from exc
            # What landed in the store is what gets the name: hash the copy, not the source.
            _check_sent((size, _file_digest(tmp)), digest)
            os.chmod(tmp, 0o444)
            # An object of this name that did not hash to it (damaged) is replaced by the true bytes.
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def get(self, name: str, out: IO[bytes]) -> None:
        from aos.reader import open_regular

        fd = open_regular(self.root / name)  # stream-missing when absent, or not a regular file
        try:
            _copy(fd, out)
        finally:
            os.close(fd)

    def put_bytes(self, name: str, data: bytes) -> None:
        """Write a new object ``name`` (a path under the store) whole, by an atomic rename: readers see all
        of it or none. Names are unique (the index's): an object is never rewritten."""
        final = self.root / name
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp_fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".part")
        except OSError as exc:
            raise StoreUnreachable(f"{self.root}: cannot write to the store: {exc.strerror or exc}") from exc
        try:
            with os.fdopen(tmp_fd, "wb") as out:
                out.write(data)
                os.fsync(out.fileno())
            os.chmod(tmp, 0o444)
            os.replace(tmp, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise StoreUnreachable(f"{self.root}: cannot write to the store: {exc.strerror or exc}") from exc

    def get_bytes(self, name: str) -> bytes:
        from observe.query.tables import read_private

        return read_private(self.root / name)

    def delete(self, name: str) -> None:
        """Remove an object (the index's, once compacted); one already gone is not an error."""
        try:
            os.unlink(self.root / name)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreUnreachable(f"{self.root}: cannot remove {name}: {exc.strerror or exc}") from exc

    def list_names(self, prefix: str) -> list[str]:
        """The names of the objects under ``prefix`` (a folder path ending in ``/``), temporary files left out."""
        base = self.root / prefix
        if not base.is_dir():
            return []
        return [
            p.relative_to(self.root).as_posix() for p in base.rglob("*") if p.is_file() and not p.name.startswith(".")
        ]


class _Bucket:
    """``s3://BUCKET/PREFIX`` through boto3: multipart in both directions, never the whole file in memory."""

    def __init__(self, bucket: str, prefix: str) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self._client: Any = None

    def url(self, name: str) -> str:
        return f"s3://{self.bucket}/{self._key(name)}"

    def local_path(self, name: str) -> Path | None:
        """None: a bucket's objects are not on this machine."""
        return None

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def client(self) -> Any:
        if self._client is None:
            self._client = _s3_client(self._errors)
        return self._client

    def _transfer(self) -> Any:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(
            multipart_threshold=PART_SIZE,
            multipart_chunksize=PART_SIZE,
            max_concurrency=CONCURRENCY,
            preferred_transfer_client="classic",
        )
        # Parts read from a stream wait in memory for a thread: at most this many at once.
        config.max_in_memory_upload_chunks = CONCURRENCY
        return config

    def size(self, name: str) -> int | None:
        """The stored object's size, or None when there is none."""
        try:
            with self._errors("look up", name):
                head = self.client().head_object(Bucket=self.bucket, Key=self._key(name))
        except StreamMissing:
            return None
        return int(head["ContentLength"])

    def put(self, fd: int, name: str, digest: str) -> None:
        size = os.fstat(fd).st_size
        # The name is the digest, so an object of that name holds these bytes unless it was
        # damaged in the store; a size that differs is such damage, and the true bytes replace it.
        # (fetch checks every byte; push trusts a stored object of the right size.)
        if self.size(name) == size:
            return
        reader = _HashingReader(fd)
        with self._errors("upload", name):
            self.client().upload_fileobj(
                reader,
                self.bucket,
                self._key(name),
                ExtraArgs={"Metadata": {"blake3": digest}, "ContentType": "application/vnd.apache.arrow.stream"},
                Config=self._transfer(),
            )
        try:
            _check_sent((reader.size, reader.hash.hexdigest()), digest)
        except StreamDigest:
            with contextlib.suppress(Exception), self._errors("remove", name):
                self.client().delete_object(Bucket=self.bucket, Key=self._key(name))
            raise

    def get(self, name: str, out: IO[bytes]) -> None:
        with self._errors("download", name):
            self.client().download_fileobj(self.bucket, self._key(name), out, Config=self._transfer())

    def put_bytes(self, name: str, data: bytes) -> None:
        """Write a new object ``name`` whole (one PUT: readers see all of it or none)."""
        with self._errors("upload", name):
            self.client().put_object(Bucket=self.bucket, Key=self._key(name), Body=data)

    def get_bytes(self, name: str) -> bytes:
        with self._errors("download", name):
            body = self.client().get_object(Bucket=self.bucket, Key=self._key(name))["Body"]
            return bytes(body.read())

    def delete(self, name: str) -> None:
        """Remove an object (the index's, once compacted); S3 answers the same for one already gone."""
        with self._errors("remove", name):
            self.client().delete_object(Bucket=self.bucket, Key=self._key(name))

    def list_names(self, prefix: str) -> list[str]:
        """The names of the objects under ``prefix``, every page of the listing."""
        names: list[str] = []
        strip = len(self._key(""))
        with self._errors("list", prefix):
            pages = (
                self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(prefix))
            )
            for page in pages:
                names.extend(str(o["Key"])[strip:] for o in page.get("Contents", []))
        return names

    @contextlib.contextmanager
    def _errors(self, doing: str, name: str | None = None) -> Iterator[None]:
        """Map boto3's and s3transfer's exceptions to named refusals."""
        _require_boto3()
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError
        from s3transfer.exceptions import RetriesExceededError, S3DownloadFailedError, S3UploadFailedError

        where = self.url(name) if name else f"s3://{self.bucket}/{self.prefix}"
        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("404", "NoSuchKey", "NotFound") or (status == 404 and code != "NoSuchBucket"):
                raise StreamMissing(f"{where}: no such object in the store") from exc
            if code == "NoSuchBucket":
                raise StoreUnreachable(f"{where}: no such bucket") from exc
            raise StoreUnreachable(f"cannot {doing} {where}: {code or status}: {error.get('Message', exc)}") from exc
        except (BotoCoreError, Boto3Error, RetriesExceededError, S3DownloadFailedError, S3UploadFailedError) as exc:
            raise StoreUnreachable(f"cannot {doing} {where}: {exc}") from exc


_Store = _Folder | _Bucket

#: One boto3 client per AWS configuration (the AWS_* variables): making one loads the service
#: model (a fifth of a second), too slow to pay per stream when an audit re-fetches thousands.
_CLIENTS: dict[tuple[tuple[str, str], ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _require_boto3() -> None:
    """Refuse as ``store-unreachable``, saying how to install the ``s3`` extra, when boto3 cannot be imported."""
    try:
        import boto3  # noqa: F401
        import botocore  # noqa: F401
        import s3transfer  # noqa: F401
    except ImportError as exc:
        from observe.util.install import install_hint

        raise StoreUnreachable(f"an s3:// store needs boto3, which is not installed: {install_hint('s3')}") from exc


def _s3_client(errors: Callable[[str], contextlib.AbstractContextManager[None]]) -> Any:
    _require_boto3()
    import boto3
    from botocore.config import Config

    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(StoreVars.AWS_PREFIX)))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            # Endpoint, region, credentials and retries come from the standard AWS variables and files.
            config = Config(connect_timeout=10, read_timeout=60, max_pool_connections=CONCURRENCY + 2)
            with errors("connect to"):
                client = _CLIENTS[key] = boto3.session.Session().client("s3", config=config)
        return client


def open_store(url: str | os.PathLike[str]) -> _Store:
    """The store a URL names: a folder (a path or ``file://``) or ``s3://BUCKET/PREFIX``."""
    text = os.fspath(url)
    scheme = _SCHEME.match(text)
    if scheme is None:  # a path
        if not text:
            raise StoreUrl("an empty store URL")
        return _Folder(Path(text))
    parts = urlsplit(text)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise StoreUrl(f"{text}: a file:// store is on this machine (file:///PATH), not on {parts.netloc}")
        if parts.query or parts.fragment:
            raise StoreUrl(f"{text}: a file:// store takes no query or fragment")
        from urllib.request import url2pathname

        path = url2pathname(parts.path)  # percent-decoded, as Path.as_uri() encodes it
        if not path:
            raise StoreUrl(f"{text}: names no folder")
        return _Folder(Path(path))
    if parts.scheme == "s3":
        if not parts.netloc or parts.query or parts.fragment or "@" in parts.netloc:
            raise StoreUrl(f"{text}: an S3 store is s3://BUCKET or s3://BUCKET/PREFIX")
        return _Bucket(parts.netloc, parts.path.strip("/"))
    raise StoreUrl(f"{text}: unknown store scheme {parts.scheme!r}; a store is a folder, file://PATH or s3://BUCKET")


def _object(url: str | os.PathLike[str]) -> tuple[_Store, str, str]:
    """Split the URL of a stored stream into its store, its object name and the digest the name gives."""
    text = os.fspath(url)
    head, _, name = text.rstrip().rpartition("/")
    match = _NAME.match(name)
    if match is None or not head:
        raise StoreUrl(f"{text}: not a stored stream (STORE/<64 hex digits of BLAKE3>.aos)")
    return open_store(head), name, match.group(1)


# -- push and fetch -------------------------------------------------------------------------


def push(
    path: str | os.PathLike[str],
    store_url: str | os.PathLike[str] = DEFAULT_STORE,
    key: Verifier | None = None,
    *,
    index: bool = True,
) -> str:
    """Verify the stream at ``path``, store it as ``STORE/<file blake3>.aos``, and return that URL.

    Refused by name, storing nothing, when the stream does not verify (its own
    refusal; with ``key``, a signature by that key is required too). Pushing the
    same bytes again is a no-op. The bytes sent are hashed as they are read; if
    they differ from the ones verified (the file changed meanwhile) the object is
    removed and the push refused (``stream-digest``).

    With ``index`` (the default) the stream's row is appended to the store's
    evidence index (``observe.store_index``): every push appends one, so a
    row lost to a failed write is written by pushing again.
    """
    from aos.reader import open_regular
    from aos.verify import verify_stream

    store = open_store(store_url)
    v = verify_stream(path, key)
    name = f"{v.file_blake3}.aos"
    fd = open_regular(path)
    try:
        store.put(fd, name, v.file_blake3)
    finally:
        os.close(fd)
    if index:
        from observe.store_index import describe, remember, write_entries

        entry = describe(path, v, url=store.url(name), entered_by="push")
        write_entries(store, [entry])
        remember(store, [(entry, v)])
    return store.url(name)


def fetch(url: str | os.PathLike[str], out: str | os.PathLike[str], key: Verifier | None = None) -> Path:
    """Download a stored stream to ``out``, only if its bytes hash to its name and it verifies.

    The bytes land in a temporary file beside ``out`` first; ``out`` is replaced
    (atomically) only when the file's BLAKE3 equals the digest in the URL
    (else ``stream-digest``) and the stream is intact and sealed (signed by
    ``key`` when given; else its own refusal). On any refusal nothing is left at
    ``out`` and an existing file there is untouched.
    """
    from aos.verify import verify_stream

    store, name, digest = _object(url)
    target = Path(out)
    if target.is_dir():
        target = target / name
    fd, tmp = _create_beside(target)
    try:
        try:
            with os.fdopen(fd, "wb") as f:
                store.get(name, f)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:  # the store's errors are refusals already: this is the target's side
            raise StreamWrite(f"{target}: cannot write here: {exc.strerror or exc}") from exc
        # The verifier hashes the whole file too: one pass decides both (bytes that are not
        # their name are stream-digest, whatever else is wrong with them).
        try:
            got = verify_stream(tmp, key).file_blake3
        except Refusal as exc:
            got = _file_digest(tmp)
            if got == digest:
                raise
            raise StreamDigest(f"{os.fspath(url)}: the stored bytes hash to {got}, not to their name") from exc
        if got != digest:
            raise StreamDigest(f"{os.fspath(url)}: the stored bytes hash to {got}, not to their name")
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def _create_beside(target: Path) -> tuple[int, str]:
    """A new, empty temporary file in ``target``'s folder (mode 0666 less the umask, as ``target`` would get)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = str(target.parent / f".{target.name}.{secrets.token_hex(8)}.part")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as exc:
            raise StreamWrite(f"{target}: cannot write here: {exc.strerror or exc}") from exc
    raise StreamWrite(f"{target}: no free temporary name beside it")  # pragma: no cover


# -- hashing what is copied ---------------------------------------------------------------


def _file_digest(path: str | os.PathLike[str]) -> str:
    """BLAKE3 of a regular file's bytes (``stream-missing`` when it is not one)."""
    from blake3 import blake3

    from aos.reader import open_regular

    fd = open_regular(path)
    try:
        h = blake3(max_threads=blake3.AUTO)
        if os.fstat(fd).st_size:
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as view:
                h.update(view)
        return h.hexdigest()
    finally:
        os.close(fd)


def _copy(fd: int, out: IO[bytes]) -> int:
    """Copy everything readable from ``fd`` to ``out`` (in the kernel where it can); return the byte count."""
    out.flush()
    copied = 0
    try:
        while sent := os.sendfile(out.fileno(), fd, None, 1 << 30):
            copied += sent
        return copied
    except OSError:
        if copied:
            raise
    while chunk := os.read(fd, _COPY_CHUNK):  # a file system without sendfile between these files
        out.write(chunk)
        copied += len(chunk)
    out.flush()
    return copied


def _check_sent(sent: tuple[int, str], digest: str) -> None:
    size, got = sent
    if got != digest:
        raise StreamDigest(f"the file changed after it was verified: sent {size} bytes hashing to {got}, not {digest}")


@dataclass
class _HashingReader:
    """A forward-only reader of a descriptor that hashes every byte it hands out, in order.

    It does not seek, so s3transfer reads it strictly once, front to back, part by part.
    """

    fd: int
    size: int = 0

    def __post_init__(self) -> None:
        from blake3 import blake3

        self.hash = blake3(max_threads=blake3.AUTO)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def read(self, amount: int | None = -1) -> bytes:
        chunks: list[bytes] = []
        want = amount if amount is not None and amount >= 0 else None
        while want is None or want > 0:
            chunk = os.read(self.fd, min(want, _COPY_CHUNK) if want is not None else _COPY_CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
            if want is not None:
                want -= len(chunk)
        data = b"".join(chunks)
        self.hash.update(data)
        self.size += len(data)
        return data
