"""Benchmark the stream store: push and fetch throughput against a plain copy with the same client.

    python bench/bench_store.py [SIZE]          # stream size (K/M/G), default 64M; the issue's figure is 1G

Starts moto's S3-compatible server on 127.0.0.1 (as the test suite does), writes
a sealed stream of about SIZE that does not compress (artifact chunks of random
bytes), and measures over ``ALPHA_BENCH_REPEAT`` (default 3) interleaved runs
(it asserts nothing):

- S3: ``push`` (verify, then a hashed multipart upload) against boto3's
  ``upload_file`` of the same file, and ``fetch`` (multipart download, BLAKE3 of
  the whole file, verify, rename) against ``download_file``; both sides with the
  same client and the same transfer settings (observe.store.PART_SIZE,
  CONCURRENCY). A push of a stream already stored (a HEAD, no upload) too;
- a local folder: ``push``/``fetch`` against ``shutil.copyfile`` and a copy
  followed by ``fsync`` (push and fetch make their file durable before the rename);
- the verifier alone over the file, which push and fetch both pay.

Each line gives the best and median seconds, MB/s and the ratio to the plain copy
(best over best). The server is one Python process: on a real object store the
transfer's share grows and the ratios move toward 1.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from aos.verify import verify_stream
from aos.writer import StreamWriter
from observe import store


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def make_stream(path: Path, size: int) -> None:
    """A sealed stream of about ``size`` bytes of incompressible artifact chunks."""
    w = StreamWriter(path, background_flush=False, fsync="never")
    try:
        w.append("stream.open", {"stream_id": w.stream_id, "argv": ["bench"], "labels": {}})
        chunk = 1 << 20
        for offset in range(0, size, chunk):
            w.append("artifact.chunk", {"path": "blob.bin", "offset": offset}, data=os.urandom(chunk))
        w.seal()
    finally:
        w.close()


@contextmanager
def s3_server(log: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/", timeout=5):
                    break
            except urllib.error.HTTPError:
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"moto's server did not start: {log.read_text(errors='replace')}") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def copy_fsync(src: Path, dst: Path) -> None:
    """A plain copy made durable, as push and fetch make theirs."""
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    size = parse_size(sys.argv[1] if len(sys.argv) > 1 else "64M")
    repeat = int(os.environ.get("ALPHA_BENCH_REPEAT", "3"))
    with tempfile.TemporaryDirectory(prefix="bench-store-", dir=os.environ.get("ALPHA_BENCH_TMP")) as tmp_name:
        tmp = Path(tmp_name)
        stream = tmp / "stream.aos"
        t = timed(lambda: make_stream(stream, size))
        nbytes = stream.stat().st_size
        print(
            f"stream: {nbytes / 1e6:.0f} MB ({t:.1f} s to write); {repeat} runs; "
            f"part {store.PART_SIZE >> 20} MiB x {store.CONCURRENCY} threads"
        )
        with s3_server(tmp / "moto.log") as endpoint:
            os.environ.update(
                AWS_ENDPOINT_URL=endpoint,
                AWS_ACCESS_KEY_ID="bench",
                AWS_SECRET_ACCESS_KEY="bench",
                AWS_DEFAULT_REGION="us-east-1",
            )
            bucket = store.open_store("s3://bench")
            assert isinstance(bucket, store._Bucket)
            client = bucket.client()
            client.create_bucket(Bucket="bench")
            config = bucket._transfer()
            times: dict[str, list[float]] = {}

            def run(name: str, fn: Callable[[], object]) -> None:
                times.setdefault(name, []).append(timed(fn))

            out = tmp / "out.aos"
            for i in range(repeat):
                raw, prefix, folder = f"raw/{i}", f"s3://bench/run{i}", tmp / f"folder{i}"
                run("verify (alone)", lambda: verify_stream(stream))
                run("s3 upload_file", lambda raw=raw: client.upload_file(str(stream), "bench", raw, Config=config))
                url = store.push(stream, prefix)  # warm: the client is made once per configuration
                client.delete_object(Bucket="bench", Key=url.split("/", 3)[3])
                run("s3 push", lambda prefix=prefix: store.push(stream, prefix))
                run("s3 push again (stored)", lambda prefix=prefix: store.push(stream, prefix))
                run("s3 download_file", lambda raw=raw: client.download_file("bench", raw, str(out), Config=config))
                out.unlink()
                run("s3 fetch", lambda url=url: store.fetch(url, out))
                out.unlink()
                client.delete_object(Bucket="bench", Key=raw)
                client.delete_object(Bucket="bench", Key=url.split("/", 3)[3])

                run("folder copyfile", lambda: shutil.copyfile(stream, tmp / "copy.aos"))
                (tmp / "copy.aos").unlink()
                run("folder copyfile+fsync", lambda: copy_fsync(stream, tmp / "copy.aos"))
                (tmp / "copy.aos").unlink()
                local = store.open_store(folder).url(f"{verify_stream(stream).file_blake3}.aos")
                run("folder push", lambda folder=folder: store.push(stream, folder))
                run("folder fetch", lambda local=local: store.fetch(local, out))
                out.unlink()
                shutil.rmtree(folder)

    baseline = {
        "s3 push": "s3 upload_file",
        "s3 push again (stored)": "s3 upload_file",
        "s3 fetch": "s3 download_file",
        "folder push": "folder copyfile+fsync",
        "folder fetch": "folder copyfile+fsync",
    }
    width = max(len(k) for k in times)
    for name, ts in times.items():
        best, median = min(ts), statistics.median(ts)
        ratio = f"  x{best / min(times[baseline[name]]):.2f} vs {baseline[name]}" if name in baseline else ""
        print(f"{name:<{width}}  best {best:7.2f} s  median {median:7.2f} s  {nbytes / best / 1e6:8.0f} MB/s{ratio}")


if __name__ == "__main__":
    main()
