"""The content-addressed stream store: push verifies and stores under the file's BLAKE3, fetch checks both.

Run against a local folder and against a real S3-compatible server the suite
starts (moto's standalone server, ``s3_bucket`` in conftest.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aos.verify
from aos.verify import verify_stream
from observe.store import fetch, open_store, push
from tests.helpers.paths import ROOT
from tests.helpers.refusals import refused
from tests.helpers.run import alpha, child_env
from tests.helpers.s3 import S3Bucket, free_port
from tracker.testing import sealed_stream

HEX64 = "0123456789abcdef" * 4


def digest_of(url: str) -> str:
    return url.rsplit("/", 1)[1].removesuffix(".aos")


def leftovers(folder: Path) -> list[str]:
    """Every file in ``folder`` (a temporary ``.part`` left behind would show here), a store's evidence index
    (the folder ``index``, tests/observe/test_store_index.py) aside."""
    return sorted(p.name for p in folder.iterdir() if not (p.name == "index" and p.is_dir()))


def big_stream(path: Path, mib: int) -> Path:
    """A sealed stream of about ``mib`` MiB that does not compress (artifact chunks of random bytes)."""
    from aos.writer import StreamWriter

    w = StreamWriter(path, background_flush=False, fsync="never")
    try:
        w.append("stream.open", {"stream_id": w.stream_id, "argv": ["big"], "labels": {}})
        for i in range(mib):
            w.append("artifact.chunk", {"path": "big.bin", "offset": i << 20}, data=os.urandom(1 << 20))
        w.seal()
    finally:
        w.close()
    return path


class TestFolderStore:
    """A local folder (a path or file://) as the store."""

    def test_round_trip(self, stream: Path, tmp_path: Path) -> None:
        """push stores the file under its BLAKE3 and returns its file:// URL; fetch writes the same bytes back."""
        store = tmp_path / "store"
        url = push(stream, store)
        digest = verify_stream(stream).file_blake3
        assert (store / f"{digest}.aos").absolute().as_uri() == url
        assert stream.read_bytes() == (store / f"{digest}.aos").read_bytes()
        out = tmp_path / "back.aos"
        assert out == fetch(url, out)
        assert stream.read_bytes() == out.read_bytes()
        assert [f"{digest}.aos"] == leftovers(store)
        assert 0o444 == (store / f"{digest}.aos").stat().st_mode & 0o777  # stored objects are read-only
        umask = os.umask(0o022)
        os.umask(umask)
        assert 0o666 & ~umask == out.stat().st_mode & 0o777  # a fetched file is an ordinary new file

    def test_file_url_store_and_path_url(self, stream: Path, tmp_path: Path) -> None:
        """A file:// store URL is the same folder; a plain path to a stored stream fetches too."""
        store = tmp_path / "a store"
        url = push(stream, store.as_uri())
        assert url == push(stream, store)
        out = fetch(store / url.rsplit("/", 1)[1], tmp_path / "out.aos")
        assert stream.read_bytes() == out.read_bytes()

    def test_push_is_idempotent(self, stream: Path, tmp_path: Path) -> None:
        """Pushing the same file twice stores it once and leaves the stored object untouched."""
        store = tmp_path / "store"
        url = push(stream, store)
        obj = store / url.rsplit("/", 1)[1]
        before = obj.stat()
        assert url == push(stream, store)
        after = obj.stat()
        assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
        assert 1 == len(leftovers(store))

    def test_different_files_never_collide(self, tmp_path: Path) -> None:
        """Two streams get two names, each holding its own bytes."""
        a, b = tmp_path / "a.aos", tmp_path / "b.aos"
        sealed_stream(a, stdout=b"a\n")
        sealed_stream(b, stdout=b"b\n")
        store = tmp_path / "store"
        ua, ub = push(a, store), push(b, store)
        assert ua != ub
        assert a.read_bytes() == fetch(ua, tmp_path / "a2.aos").read_bytes()
        assert b.read_bytes() == fetch(ub, tmp_path / "b2.aos").read_bytes()

    @pytest.mark.parametrize("name", ["unsealed.aos", "flipped-byte.aos", "truncated-mid-batch.aos", "not-arrow.aos"])
    def test_push_refuses_what_does_not_verify(
        self, name: str, asset: Callable[[str], Path], asset_manifest: dict[str, dict[str, Any]], tmp_path: Path
    ) -> None:
        """A stream that does not verify is refused with verify's own refusal, and nothing is stored."""
        store = tmp_path / "store"
        exc = refused(lambda: push(asset(name), store))
        assert asset_manifest[name]["refusal"] == exc.name
        assert not store.exists()

    def test_push_refuses_a_missing_stream(self, tmp_path: Path) -> None:
        """A path that is not there is stream-missing."""
        assert "stream-missing" == refused(lambda: push(tmp_path / "absent.aos", tmp_path / "store")).name

    def test_tampered_object_is_refused_and_nothing_is_written(self, stream: Path, tmp_path: Path) -> None:
        """An object edited in the store is refused (stream-digest); -o is left as it was, with no temporary file."""
        store = tmp_path / "store"
        url = push(stream, store)
        obj = store / url.rsplit("/", 1)[1]
        obj.chmod(0o644)
        data = bytearray(obj.read_bytes())
        data[len(data) // 2] ^= 0xFF
        obj.write_bytes(bytes(data))
        out_dir = tmp_path / "out"
        out_dir.mkdir()
        exc = refused(lambda: fetch(url, out_dir / "s.aos"))
        assert "stream-digest" == exc.name
        assert [] == leftovers(out_dir)
        (out_dir / "s.aos").write_bytes(b"keep me")
        refused(lambda: fetch(url, out_dir / "s.aos"))
        assert b"keep me" == (out_dir / "s.aos").read_bytes()
        assert ["s.aos"] == leftovers(out_dir)

    def test_valid_stream_under_a_wrong_name(self, tmp_path: Path) -> None:
        """A good stream stored under another stream's digest is refused: the name must be its own BLAKE3."""
        a, b = tmp_path / "a.aos", tmp_path / "b.aos"
        sealed_stream(a, stdout=b"a\n")
        sealed_stream(b, stdout=b"b\n")
        store = tmp_path / "store"
        url = push(a, store)
        obj = store / url.rsplit("/", 1)[1]
        obj.chmod(0o644)
        shutil.copyfile(b, obj)
        exc = refused(lambda: fetch(url, tmp_path / "out.aos"))
        assert "stream-digest" == exc.name
        assert digest_of(url) in exc.detail
        assert not (tmp_path / "out.aos").exists()

    def test_object_that_hashes_to_its_name_but_does_not_verify(
        self, asset: Callable[[str], Path], tmp_path: Path
    ) -> None:
        """Bytes placed in the store under their true BLAKE3 by hand are still verified on the way in."""
        from blake3 import blake3

        bad = asset("unsealed.aos")
        store = tmp_path / "store"
        store.mkdir()
        obj = store / f"{blake3(bad.read_bytes()).hexdigest()}.aos"
        shutil.copyfile(bad, obj)
        exc = refused(lambda: fetch(obj.as_uri(), tmp_path / "out.aos"))
        assert "stream-unsealed" == exc.name
        assert ["store"] == leftovers(tmp_path)

    def test_push_repairs_a_damaged_object(self, stream: Path, tmp_path: Path) -> None:
        """An object whose bytes no longer hash to its name is replaced by the true bytes on the next push."""
        store = tmp_path / "store"
        url = push(stream, store)
        obj = store / url.rsplit("/", 1)[1]
        obj.chmod(0o644)
        obj.write_bytes(b"damaged")
        assert url == push(stream, store)
        assert stream.read_bytes() == fetch(url, tmp_path / "out.aos").read_bytes()

    def test_file_changed_after_verification(
        self, stream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Bytes that differ from the ones verified (the file swapped meanwhile) are refused, nothing stored."""
        other = tmp_path / "other.aos"
        sealed_stream(other, stdout=b"other\n")
        real = aos.verify.verify_stream

        def verify_then_swap(path: Any, key: Any = None) -> Any:
            v = real(path, key)
            shutil.copyfile(other, stream)
            return v

        monkeypatch.setattr(aos.verify, "verify_stream", verify_then_swap)
        store = tmp_path / "store"
        exc = refused(lambda: push(stream, store))
        assert "stream-digest" == exc.name
        assert [] == leftovers(store)

    def test_missing_object(self, tmp_path: Path) -> None:
        """A name the store does not hold is stream-missing, and nothing is written."""
        (tmp_path / "store").mkdir()
        exc = refused(lambda: fetch((tmp_path / "store" / f"{HEX64}.aos").as_uri(), tmp_path / "out.aos"))
        assert "stream-missing" == exc.name
        assert ["store"] == leftovers(tmp_path)

    def test_a_fifo_in_the_store_is_refused_at_once(self, tmp_path: Path) -> None:
        """A FIFO under a stream's name is refused (stream-missing), never waited on."""
        store = tmp_path / "store"
        store.mkdir()
        os.mkfifo(store / f"{HEX64}.aos")
        assert "stream-missing" == refused(lambda: fetch(store / f"{HEX64}.aos", tmp_path / "out.aos")).name

    def test_unwritable_target(self, stream: Path, tmp_path: Path) -> None:
        """A target in a folder that does not exist is stream-write."""
        url = push(stream, tmp_path / "store")
        assert "stream-write" == refused(lambda: fetch(url, tmp_path / "no" / "such" / "s.aos")).name

    def test_unwritable_store(self, stream: Path, tmp_path: Path) -> None:
        """A store folder that cannot be created is store-unreachable."""
        (tmp_path / "file").write_text("not a folder")
        assert "store-unreachable" == refused(lambda: push(stream, tmp_path / "file" / "store")).name

    @pytest.mark.parametrize(
        "url",
        [
            "http://example.com/store",
            "file://otherhost/srv/store",
            "s3://",
            "s3:///prefix",
            "s3://user@bucket/p",
        ],
    )
    def test_not_a_store(self, url: str) -> None:
        """A URL that names no store this tool knows is store-url."""
        assert "store-url" == refused(lambda: open_store(url)).name

    @pytest.mark.parametrize(
        "url", ["s3://b/p/stream.aos", f"s3://b/{HEX64}", f"s3://b/{HEX64.upper()}.aos", f"{HEX64}.aos", ""]
    )
    def test_not_a_stored_stream(self, url: str, tmp_path: Path) -> None:
        """fetch needs STORE/<64 lowercase hex>.aos; anything else is store-url before any download."""
        assert "store-url" == refused(lambda: fetch(url, tmp_path / "out.aos")).name


class TestS3Store:
    """An S3-compatible bucket (moto's server on 127.0.0.1) as the store."""

    def test_round_trip(self, stream: Path, s3_bucket: S3Bucket, tmp_path: Path) -> None:
        """push uploads to s3://BUCKET/PREFIX/<blake3>.aos; fetch brings the same bytes back."""
        url = push(stream, f"{s3_bucket.url}/ci/runner-1/")
        digest = verify_stream(stream).file_blake3
        assert f"{s3_bucket.url}/ci/runner-1/{digest}.aos" == url
        head = s3_bucket.client.head_object(Bucket=s3_bucket.name, Key=f"ci/runner-1/{digest}.aos")
        assert digest == head["Metadata"]["blake3"]
        out = fetch(url, tmp_path / "back.aos")
        assert stream.read_bytes() == out.read_bytes()

    def test_push_is_idempotent(self, stream: Path, s3_bucket: S3Bucket) -> None:
        """Pushing the same file twice writes one object version (versioning on: a second write would show)."""
        s3_bucket.client.put_bucket_versioning(Bucket=s3_bucket.name, VersioningConfiguration={"Status": "Enabled"})
        url = push(stream, s3_bucket.url)
        assert url == push(stream, s3_bucket.url)
        versions = s3_bucket.client.list_object_versions(Bucket=s3_bucket.name).get("Versions", [])
        assert [url.rsplit("/", 1)[1]] == [v["Key"] for v in versions if not v["Key"].startswith("index/")]
        # each push appended its index row as new objects: none written twice
        index = [v["Key"] for v in versions if v["Key"].startswith("index/")]
        assert (4, 4) == (len(index), len(set(index)))

    def test_tampered_object_is_refused(self, stream: Path, s3_bucket: S3Bucket, tmp_path: Path) -> None:
        """An object overwritten in the bucket is refused on fetch (stream-digest), and nothing is left at -o."""
        url = push(stream, s3_bucket.url)
        data = bytearray(stream.read_bytes())
        data[len(data) // 2] ^= 0xFF
        s3_bucket.client.put_object(Bucket=s3_bucket.name, Key=url.rsplit("/", 1)[1], Body=bytes(data))
        out_dir = tmp_path / "out"
        out_dir.mkdir()
        assert "stream-digest" == refused(lambda: fetch(url, out_dir / "s.aos")).name
        assert [] == leftovers(out_dir)

    def test_valid_stream_under_a_wrong_name(self, tmp_path: Path, s3_bucket: S3Bucket) -> None:
        """A good stream uploaded by hand under another digest is refused (stream-digest)."""
        a = tmp_path / "a.aos"
        sealed_stream(a)
        s3_bucket.client.upload_file(str(a), s3_bucket.name, f"{HEX64}.aos")
        assert "stream-digest" == refused(lambda: fetch(f"{s3_bucket.url}/{HEX64}.aos", tmp_path / "o.aos")).name
        assert not (tmp_path / "o.aos").exists()

    def test_push_refuses_what_does_not_verify(self, asset: Callable[[str], Path], s3_bucket: S3Bucket) -> None:
        """A damaged stream is refused before anything is uploaded."""
        assert "stream-chain" == refused(lambda: push(asset("flipped-byte.aos"), s3_bucket.url)).name
        assert 0 == s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name)["KeyCount"]

    def test_file_changed_after_verification(
        self, stream: Path, tmp_path: Path, s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Bytes sent that differ from the ones verified are refused and the object removed again."""
        other = tmp_path / "other.aos"
        sealed_stream(other, stdout=b"other\n")
        real = aos.verify.verify_stream

        def verify_then_swap(path: Any, key: Any = None) -> Any:
            v = real(path, key)
            shutil.copyfile(other, stream)
            return v

        monkeypatch.setattr(aos.verify, "verify_stream", verify_then_swap)
        assert "stream-digest" == refused(lambda: push(stream, s3_bucket.url)).name
        assert 0 == s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name)["KeyCount"]

    def test_missing_object_and_bucket(self, stream: Path, s3_bucket: S3Bucket, tmp_path: Path) -> None:
        """An object that is not there is stream-missing; pushing to a bucket that is not there is store-unreachable."""
        assert "stream-missing" == refused(lambda: fetch(f"{s3_bucket.url}/{HEX64}.aos", tmp_path / "o.aos")).name
        exc = refused(lambda: push(stream, f"{s3_bucket.url}-absent/p"))
        assert ("store-unreachable", "no such bucket") == (exc.name, exc.detail.rsplit(": ", 1)[1])
        assert [] == [p for p in tmp_path.iterdir() if p.name.startswith(".o.aos")]

    def test_unreachable_endpoint(self, stream: Path, s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
        """An endpoint nothing listens on is store-unreachable, after the client's retries."""
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
        exc = refused(lambda: push(stream, s3_bucket.url))
        assert "store-unreachable" == exc.name
        assert "Could not connect" in exc.detail

    def test_bad_credentials(self, stream: Path, s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
        """No credentials at all is store-unreachable, naming the cause."""
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        exc = refused(lambda: push(stream, s3_bucket.url))
        assert "store-unreachable" == exc.name
        assert "credentials" in exc.detail

    def test_large_stream_round_trip(self, tmp_path: Path, s3_bucket: S3Bucket) -> None:
        """A 40 MiB stream goes up and down in parts (multipart) and arrives byte for byte."""
        path = big_stream(tmp_path / "big.aos", 40)
        url = push(path, f"{s3_bucket.url}/big")
        key = url.split("/", 3)[3]
        head = s3_bucket.client.head_object(Bucket=s3_bucket.name, Key=key)
        assert "-" in head["ETag"]  # a multipart upload's ETag is "<md5 of the parts' md5s>-<parts>"
        out = fetch(url, tmp_path / "back.aos")
        assert path.stat().st_size == out.stat().st_size
        assert verify_stream(path).file_blake3 == verify_stream(out).file_blake3

    def test_memory_stays_bounded(self, tmp_path: Path, s3_bucket: S3Bucket) -> None:
        """Pushing and fetching a 96 MiB stream never holds it in memory: peak anonymous memory grows far less."""
        path = big_stream(tmp_path / "big.aos", 96)
        small = tmp_path / "small.aos"
        sealed_stream(small)
        # RssAnon, sampled while the transfer runs: the heap, not the file pages the verifier maps.
        script = textwrap.dedent(
            f"""
            import threading, time
            import observe.store as store
            store.PART_SIZE = 5 * 1024 * 1024  # S3's smallest part
            store.CONCURRENCY = 2
            from aos.verify import verify_stream
            def anon():
                with open("/proc/self/status") as f:
                    return next(int(l.split()[1]) * 1024 for l in f if l.startswith("RssAnon:"))
            peak = [0]
            def sample():
                while True:
                    peak[0] = max(peak[0], anon())
                    time.sleep(0.002)
            verify_stream({str(path)!r})
            # warm up: the client's models, s3transfer's threads, the verifier's memory pool
            store.fetch(store.push({str(small)!r}, {s3_bucket.url!r}), {str(tmp_path / "small-back.aos")!r})
            base = anon()
            threading.Thread(target=sample, daemon=True).start()
            url = store.push({str(path)!r}, {s3_bucket.url!r})
            up, peak[0] = peak[0], 0
            store.fetch(url, {str(tmp_path / "back.aos")!r})
            print(base, up, peak[0])
            """
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=False)
        assert 0 == done.returncode, done.stderr
        base, up, down = (int(x) for x in done.stdout.split())
        size = path.stat().st_size
        assert (tmp_path / "back.aos").read_bytes() == path.read_bytes()
        assert up - base < size // 2, (base, up, down, size)
        assert down - base < size // 2, (base, up, down, size)


class TestCli:
    """`alpha observe push` and `alpha observe fetch`."""

    def test_push_and_fetch(self, stream: Path, tmp_path: Path) -> None:
        """push prints the URL alone; the default store is ./aos-store; fetch prints where the stream went."""
        done = alpha("observe", "push", str(stream), cwd=tmp_path, text=True, timeout=300)
        assert 0 == done.returncode, done.stderr
        url = done.stdout.strip()
        assert url == (tmp_path / "aos-store" / f"{verify_stream(stream).file_blake3}.aos").as_uri()
        done = alpha("observe", "fetch", url, "-o", str(tmp_path / "x.aos"), text=True, timeout=300)
        assert (0, f"{tmp_path / 'x.aos'}\n") == (done.returncode, done.stdout)
        assert stream.read_bytes() == (tmp_path / "x.aos").read_bytes()

    def test_s3(self, stream: Path, tmp_path: Path, s3_bucket: S3Bucket) -> None:
        """The commands reach S3 through the AWS variables; a folder as -o keeps the stored name."""
        done = alpha("observe", "push", str(stream), "--store", f"{s3_bucket.url}/runs", text=True, timeout=300)
        assert 0 == done.returncode, done.stderr
        url = done.stdout.strip()
        assert url.startswith(f"{s3_bucket.url}/runs/")
        done = alpha("observe", "fetch", url, "-o", str(tmp_path), text=True, timeout=300)
        assert 0 == done.returncode, done.stderr
        assert stream.read_bytes() == (tmp_path / url.rsplit("/", 1)[1]).read_bytes()

    def test_refusals_print_their_names(self, asset: Callable[[str], Path], tmp_path: Path) -> None:
        """A refused push or fetch prints `refused: NAME: detail` and exits 1."""
        done = alpha(
            "observe", "push", str(asset("unsealed.aos")), "--store", str(tmp_path / "st"), text=True, timeout=300
        )
        assert (1, "") == (done.returncode, done.stdout)
        assert done.stderr.startswith("refused: stream-unsealed: ")
        done = alpha("observe", "fetch", "ftp://x/y.aos", "-o", str(tmp_path / "o.aos"), text=True, timeout=300)
        assert 1 == done.returncode
        assert done.stderr.startswith("refused: store-url: ")


class TestReadme:
    """The README's "Evidence beyond one machine" block runs as written (its bucket made on the test server)."""

    def test_block_runs(self, tmp_path: Path, s3_bucket: S3Bucket) -> None:
        """push, fetch, attach by URL and audit all exit 0, and the copy is the stream's bytes."""
        import re

        text = (ROOT / "README.md").read_text(encoding="utf-8")
        section = text[text.index("## Evidence beyond one machine") : text.index("## Documentation")]
        (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
        for argv in (["tracker", "init"], ["tracker", "run", "start", "--lane", "exit-zero"]):
            done = alpha(*argv, cwd=tmp_path, text=True, timeout=300)
            assert 0 == done.returncode, done.stderr
        sealed_stream(tmp_path / "ci.aos", gate="exit-zero", scope="command")  # recorded after the run started
        script = block.replace("s3://evidence", s3_bucket.url)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            env=child_env({"RUN": done.stdout.strip()}),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert 0 == done.returncode, done.stdout + done.stderr
        assert (tmp_path / "ci.aos").read_bytes() == (tmp_path / "copy.aos").read_bytes()
        assert "1 intact, 0 changed, 0 missing" in done.stdout
