"""Container logs: CRI line parsing, the reader's options, follow across rotation, rotation itself."""

from __future__ import annotations

import asyncio
import gzip
import os
import random
import time
from pathlib import Path

import pytest

from agent.server import logs as L
from agent.server.logs import LogOptions, LogRotator, parse_line, read_log

BASE_NS = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z


def ts_text(ns: int) -> str:
    """RFC3339Nano as the runtime writes it (trailing zeros trimmed)."""
    whole = L.format_timestamp(ns)[:19]
    frac = f"{ns % 10**9:09d}".rstrip("0")
    return f"{whole}.{frac}Z" if frac else f"{whole}Z"


def rec(i: int, text: str, stream: str = "stdout", tag: str = "F") -> bytes:
    """A record i milliseconds after BASE_NS."""
    return f"{ts_text(BASE_NS + i * 1_000_000)} {stream} {tag} {text}\n".encode()


def write_file(path: Path, *records: bytes) -> Path:
    path.write_bytes(b"".join(records))
    return path


async def collect(path, opts: LogOptions, **kw) -> bytes:
    out = bytearray()

    async def write(data: bytes) -> None:
        out.extend(data)

    await read_log(str(path), opts, write, **kw)
    return bytes(out)


# --- parse_line ------------------------------------------------------------------


def test_parse_full_and_partial_lines():
    line = parse_line(b"2016-10-06T00:17:09.669794202Z stdout F hello world\n")
    assert line.ts_ns == 1475713029669794202
    assert (line.stream, line.partial, line.text) == ("stdout", False, b"hello world")
    part = parse_line(b"2016-10-06T00:17:09.5Z stderr P  two  spaces kept ")
    assert (part.stream, part.partial, part.text) == ("stderr", True, b" two  spaces kept ")
    assert part.ts_ns == 1475713029_500000000


def test_parse_empty_text_tags_and_offsets():
    assert parse_line(b"2016-10-06T00:17:09Z stdout F \n").text == b""
    assert parse_line(b"2016-10-06T00:17:09Z stdout F").text == b""
    assert parse_line(b"2016-10-06T00:17:09Z stdout F:extra x").partial is False
    # An offset is converted: 02:17:09+02:00 is 00:17:09Z.
    assert (
        parse_line(b"2016-10-06T02:17:09.1+02:00 stdout F x").ts_ns
        == parse_line(b"2016-10-06T00:17:09.100Z stdout F x").ts_ns
    )
    # Digits past nanoseconds are dropped.
    assert parse_line(b"2016-10-06T00:17:09.1234567899Z stdout F x").ts_ns % 10**9 == 123456789


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"\n",
        b"garbage",
        b"2016-10-06T00:17:09Z stdout",
        b"2016-10-06T00:17:09Z stdin F x",  # unknown stream
        b"2016-10-06T00:17:09Z stdout X x",  # unknown tag
        b"2016-13-06T00:17:09Z stdout F x",  # month 13
        b"2016-10-06T00:17:09 stdout F x",  # no zone
        b"2016-10-06 00:17:09Z stdout F x",  # not RFC 3339
        b'{"log":"docker json"}',
    ],
)
def test_parse_malformed_lines(line):
    assert parse_line(line) is None


# --- options ---------------------------------------------------------------------


def test_options_from_query():
    now = BASE_NS
    assert LogOptions.from_query({}, now) == LogOptions()
    opts = LogOptions.from_query(
        {"follow": "true", "tailLines": "10", "timestamps": "1", "sinceSeconds": "60", "limitBytes": "500"}, now
    )
    assert opts == LogOptions(follow=True, tail_lines=10, timestamps=True, since_ns=now - 60 * 10**9, limit_bytes=500)
    assert LogOptions.from_query({"sinceTime": "2023-11-14T22:13:20.5Z"}, now).since_ns == BASE_NS + 5 * 10**8
    # Upstream's booleans: an empty value is true, 0/false are false.
    assert LogOptions.from_query({"follow": ""}, now).follow is True
    assert LogOptions.from_query({"follow": "False"}, now).follow is False
    assert LogOptions.from_query({"timestamps": "0"}, now).timestamps is False
    # The older "tail" spelling wins; "all" means no limit.
    assert LogOptions.from_query({"tail": "3", "tailLines": "9"}, now).tail_lines == 3
    assert LogOptions.from_query({"tail": "all", "tailLines": "9"}, now).tail_lines is None
    assert LogOptions.from_query({"stream": "Stderr"}, now).stream == "stderr"
    assert LogOptions.from_query({"stream": "All"}, now).stream is None


@pytest.mark.parametrize(
    "query, words",
    [
        ({"tailLines": "abc"}, ['tailLines "abc"', "integer"]),
        ({"tailLines": "-1"}, ["tailLines -1", "greater than or equal to 0"]),
        ({"tail": "x"}, ['tail "x"', "integer"]),
        ({"sinceSeconds": "0"}, ["sinceSeconds 0", "greater than 0"]),
        ({"sinceSeconds": "1.5"}, ['sinceSeconds "1.5"', "integer"]),
        ({"limitBytes": "0"}, ["limitBytes 0", "greater than 0"]),
        ({"limitBytes": "99999999999999999999"}, ["limitBytes", "64-bit"]),
        ({"sinceSeconds": "5", "sinceTime": "2023-11-14T22:13:20Z"}, ["at most one"]),
        ({"sinceTime": "yesterday"}, ["sinceTime", '"yesterday"']),
        ({"stream": "stdin"}, ['stream "stdin"', "Stdout"]),
    ],
)
def test_options_reject_bad_values(query, words):
    with pytest.raises(ValueError) as info:
        LogOptions.from_query(query, BASE_NS)
    for word in words:
        assert word in str(info.value)


# --- reading ---------------------------------------------------------------------


@pytest.fixture
def mixed(tmp_path) -> Path:
    return write_file(
        tmp_path / "0.log",
        rec(0, "one"),
        rec(1, "err one", "stderr"),
        rec(2, "two-a ", tag="P"),
        rec(3, "err two-a ", "stderr", "P"),
        rec(4, "two-b ", tag="P"),
        rec(5, "err two-b", "stderr"),
        b"this line is not CRI\n",
        rec(6, "two-c"),
        rec(7, "three"),
    )


async def test_read_whole_file_joins_partials_per_stream(mixed):
    assert await collect(mixed, LogOptions()) == b"one\nerr one\nerr two-a err two-b\ntwo-a two-b two-c\nthree\n"


async def test_stream_filter(mixed):
    assert await collect(mixed, LogOptions(stream="stdout")) == b"one\ntwo-a two-b two-c\nthree\n"
    assert await collect(mixed, LogOptions(stream="stderr")) == b"err one\nerr two-a err two-b\n"


async def test_timestamps_use_the_first_chunk_and_nine_digits(mixed):
    out = (await collect(mixed, LogOptions(timestamps=True, stream="stdout"))).splitlines()
    assert out[0] == b"2023-11-14T22:13:20.000000000Z one"
    assert out[1] == b"2023-11-14T22:13:20.002000000Z two-a two-b two-c"
    assert out[2] == b"2023-11-14T22:13:20.007000000Z three"


async def test_since_filters_by_timestamp(mixed):
    since = BASE_NS + 2 * 1_000_000
    assert await collect(mixed, LogOptions(since_ns=since)) == b"err two-a err two-b\ntwo-a two-b two-c\nthree\n"
    assert await collect(mixed, LogOptions(since_ns=BASE_NS + 10**9)) == b""


async def test_limit_bytes_caps_exactly(mixed):
    assert await collect(mixed, LogOptions(limit_bytes=10)) == b"one\nerr on"
    assert await collect(mixed, LogOptions(limit_bytes=4)) == b"one\n"
    full = await collect(mixed, LogOptions())
    assert await collect(mixed, LogOptions(limit_bytes=10_000)) == full


async def test_tail_counts_complete_lines(mixed):
    assert await collect(mixed, LogOptions(tail_lines=0)) == b""
    assert await collect(mixed, LogOptions(tail_lines=1)) == b"three\n"
    # The joined stdout line's first chunk sits before the stderr lines.
    assert await collect(mixed, LogOptions(tail_lines=2)) == b"two-a two-b two-c\nthree\n"
    assert await collect(mixed, LogOptions(tail_lines=2, stream="stderr")) == b"err one\nerr two-a err two-b\n"
    assert await collect(mixed, LogOptions(tail_lines=100)) == await collect(mixed, LogOptions())
    assert (
        await collect(mixed, LogOptions(tail_lines=2, timestamps=True, limit_bytes=40))
        == b"2023-11-14T22:13:20.002000000Z two-a two"
    )


async def test_unterminated_last_record_and_dangling_partial(tmp_path):
    path = write_file(tmp_path / "0.log", rec(0, "done"), rec(1, "half ", tag="P"), rec(2, "no newline yet")[:-1])
    # Non-follow reading prints what is there, as upstream does.
    assert await collect(path, LogOptions()) == b"done\nhalf no newline yet\n"
    path = write_file(tmp_path / "1.log", rec(0, "done"), rec(1, "dangling", tag="P"))
    assert await collect(path, LogOptions()) == b"done\ndangling"
    # A line still being written does not count for the tail.
    assert await collect(path, LogOptions(tail_lines=1)) == b"done\ndangling"


async def test_missing_file_raises_before_writing(tmp_path):
    with pytest.raises(FileNotFoundError):
        await collect(tmp_path / "nope.log", LogOptions())


def _reference(records: list[tuple[str, bool, str]]) -> list[bytes]:
    """Logical lines of (stream, partial, text) records, computed the obvious way."""
    pending: dict[str, list[str]] = {}
    out: list[bytes] = []
    for stream, partial, text in records:
        pending.setdefault(stream, []).append(text)
        if not partial:
            out.append("".join(pending.pop(stream)).encode() + b"\n")
    for chunks in pending.values():
        out.append("".join(chunks).encode())
    return out


@pytest.mark.parametrize("seed", range(6))
async def test_tail_matches_reference_on_random_files(tmp_path, seed):
    rnd = random.Random(seed)
    records = []
    for i in range(rnd.randint(5, 80)):
        records.append((rnd.choice(["stdout", "stderr"]), rnd.random() < 0.35, f"r{i}-" + "x" * rnd.randint(0, 30)))
    # Every stream ends its last line (the tail counts complete lines only).
    records += [("stdout", False, "end-out"), ("stderr", False, "end-err")]
    path = write_file(tmp_path / "0.log", *(rec(i, t, s, "P" if p else "F") for i, (s, p, t) in enumerate(records)))
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        for n in (0, 1, 2, 5, 17):
            for stream in (None, "stdout", "stderr"):
                # Block size does not change the answer.
                assert L.tail_offset(f.fileno(), n, stream, block=7) == L.tail_offset(f.fileno(), n, stream)
                assert 0 <= L.tail_offset(f.fileno(), n, stream) <= size
                want = _reference([r for r in records if stream is None or r[0] == stream])
                got = await collect(path, LogOptions(tail_lines=n, stream=stream))
                assert got == b"".join(want[-n:] if n else []), (n, stream)


async def test_tail_reads_only_the_end_of_a_big_file(tmp_path, monkeypatch):
    line = rec(0, "y" * 200)
    path = tmp_path / "0.log"
    with open(path, "wb") as f:
        for _ in range(100):
            f.write(line * 1000)  # ~22 MB
        f.write(rec(1, "second to last") + rec(2, "last"))
    read = []
    real_pread = os.pread

    def counting_pread(fd, n, offset):
        read.append(n)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(L.os, "pread", counting_pread)
    started = time.monotonic()
    assert await collect(path, LogOptions(tail_lines=2)) == b"second to last\nlast\n"
    assert sum(read) <= 2 * L._BLOCK
    out = await collect(path, LogOptions(tail_lines=3000))
    assert out.count(b"\n") == 3000 and out.endswith(b"last\n")
    assert sum(read) < 2 * 3000 * len(line)
    assert time.monotonic() - started < 10


# --- follow ----------------------------------------------------------------------


async def until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


class Follower:
    def __init__(self, path, opts: LogOptions) -> None:
        self.out = bytearray()
        self.running = True

        async def write(data: bytes) -> None:
            self.out.extend(data)

        self.task = asyncio.create_task(
            read_log(str(path), opts, write, is_running=lambda: self.running, poll_interval=0.01)
        )


def append(path: Path, *records: bytes) -> None:
    with open(path, "ab") as f:
        f.write(b"".join(records))


async def test_follow_streams_appends_until_the_container_stops(tmp_path):
    path = write_file(tmp_path / "0.log", rec(0, "a"), rec(1, "b"), rec(2, "c"))
    fol = Follower(path, LogOptions(follow=True, tail_lines=2))
    await until(lambda: fol.out == b"b\nc\n")
    append(path, rec(3, "d"))
    await until(lambda: fol.out.endswith(b"d\n"))
    # A line arriving in pieces: half a record, then the rest with a partial join.
    whole = rec(4, "e1 ", tag="P") + rec(5, "e2")
    append(path, whole[:20])
    await asyncio.sleep(0.05)
    append(path, whole[20:])
    await until(lambda: fol.out.endswith(b"e1 e2\n"))
    assert not fol.task.done()
    append(path, rec(6, "last words"))
    fol.running = False
    await asyncio.wait_for(fol.task, 5)
    assert fol.out == b"b\nc\nd\ne1 e2\nlast words\n"


async def test_follow_continues_across_rotation(tmp_path):
    path = tmp_path / "0.log"
    write_file(path, rec(0, "before"))
    fol = Follower(path, LogOptions(follow=True))
    await until(lambda: fol.out == b"before\n")
    rotated = tmp_path / "0.log.20240101-000000"
    os.rename(path, rotated)
    # The runtime writes to the old file until it reopens.
    append(rotated, rec(1, "late in old"))
    await asyncio.sleep(0.05)
    write_file(path, rec(2, "first in new"))
    await until(lambda: fol.out.endswith(b"first in new\n"))
    append(path, rec(3, "second in new"))
    await until(lambda: fol.out.endswith(b"second in new\n"))
    fol.running = False
    await asyncio.wait_for(fol.task, 5)
    assert fol.out == b"before\nlate in old\nfirst in new\nsecond in new\n"


async def test_follow_of_a_stopped_container_ends_at_eof(tmp_path):
    path = write_file(tmp_path / "0.log", rec(0, "only"))
    out = await asyncio.wait_for(
        collect(path, LogOptions(follow=True), is_running=lambda: False, poll_interval=0.01), 5
    )
    assert out == b"only\n"


async def test_follow_stops_at_the_byte_limit(tmp_path):
    path = write_file(tmp_path / "0.log", rec(0, "abc"))
    fol = Follower(path, LogOptions(follow=True, limit_bytes=6))
    await until(lambda: fol.out == b"abc\n")
    append(path, rec(1, "defgh"))
    await asyncio.wait_for(fol.task, 5)  # still "running", but the limit is reached
    assert fol.out == b"abc\nde"


# --- rotation --------------------------------------------------------------------


class FakeCri:
    """Stands in for CriClient.reopen_container_log: creates the file at the path
    the runtime would reopen, or fails when told to."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths
        self.calls: list[str] = []
        self.fail: set[str] = set()

    async def reopen_container_log(self, container_id: str, *, timeout=None) -> None:
        self.calls.append(container_id)
        if container_id in self.fail:
            raise RuntimeError("container is not running")
        self.paths[container_id].touch()


class Clock:
    def __init__(self) -> None:
        self.now = time.mktime((2024, 5, 1, 12, 0, 0, 0, 0, -1))

    def __call__(self) -> float:
        return self.now


def stamp(t: float) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(t))


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name))


async def test_rotation_renames_reopens_and_keeps_small_logs(tmp_path):
    big, small = tmp_path / "big.log", tmp_path / "small.log"
    big.write_bytes(rec(0, "x" * 100))
    small.write_bytes(rec(0, "x"))
    cri, clock = FakeCri({"big": big, "small": small}), Clock()
    rotator = LogRotator(cri, max_size=100, max_files=3, clock=clock)
    await rotator.rotate([("big", str(big)), ("small", str(small))])
    assert cri.calls == ["big"]
    assert siblings(big) == ["big.log", f"big.log.{stamp(clock.now)}"]
    assert big.read_bytes() == b""
    assert (tmp_path / f"big.log.{stamp(clock.now)}").read_bytes() == rec(0, "x" * 100)
    assert siblings(small) == ["small.log"]


async def test_rotation_compresses_older_and_prunes_to_max_files(tmp_path):
    path = tmp_path / "0.log"
    cri, clock = FakeCri({"c": path}), Clock()
    rotator = LogRotator(cri, max_size=50, max_files=3, clock=clock)
    contents = []
    for i in range(4):
        data = rec(i, f"generation {i} " + "z" * 60)
        path.write_bytes(data)
        contents.append(data)
        await rotator.rotate([("c", str(path))])
        clock.now += 60
    names = siblings(path)
    assert len(names) == 3  # the live file and two rotations
    assert names[0] == "0.log"
    older, newest = names[1], names[2]
    assert older.endswith(".gz") and not newest.endswith(".gz")
    assert gzip.decompress((tmp_path / older).read_bytes()) == contents[2]
    assert (tmp_path / newest).read_bytes() == contents[3]
    assert not any(n.endswith(".tmp") for n in names)


async def test_a_pass_without_rotation_still_prunes_and_compresses(tmp_path):
    path = tmp_path / "0.log"
    path.write_bytes(b"live\n")
    for i, name in enumerate(["20240101-000000", "20240101-000001", "20240101-000002", "20240101-000003"]):
        (tmp_path / f"0.log.{name}").write_bytes(f"old {i}\n".encode())
    (tmp_path / "0.log.20240101-000002.gz").write_bytes(gzip.compress(b"old 2\n"))  # left behind
    (tmp_path / "0.log.20231231-000000.tmp").write_bytes(b"interrupted")
    (tmp_path / "0.log.notes").write_bytes(b"not ours")
    cri = FakeCri({"c": path})
    await LogRotator(cri, max_size=1000, max_files=3).rotate([("c", str(path))])
    assert cri.calls == []
    assert siblings(path) == ["0.log", "0.log.20240101-000002.gz", "0.log.20240101-000003", "0.log.notes"]


async def test_failed_reopen_undoes_the_rename_and_others_go_on(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"a" * 200)
    b.write_bytes(b"b" * 200)
    cri = FakeCri({"a": a, "b": b})
    cri.fail.add("a")
    await LogRotator(cri, max_size=100, max_files=2, clock=Clock()).rotate([("a", str(a)), ("b", str(b))])
    assert cri.calls == ["a", "b"]
    assert siblings(a) == ["a.log"] and a.read_bytes() == b"a" * 200
    assert len(siblings(b)) == 2 and b.read_bytes() == b""


async def test_missing_live_log_is_recovered_by_reopening(tmp_path):
    path = tmp_path / "0.log"
    cri = FakeCri({"c": path})
    await LogRotator(cri, max_size=100, max_files=2).rotate([("c", str(path))])
    assert cri.calls == ["c"] and path.exists()


async def test_rotations_within_one_second_keep_distinct_ordered_names(tmp_path):
    path = tmp_path / "0.log"
    cri, clock = FakeCri({"c": path}), Clock()
    rotator = LogRotator(cri, max_size=10, max_files=5, clock=clock)
    for i in range(3):
        path.write_bytes(f"round {i} ".encode() * 5)
        await rotator.rotate([("c", str(path))])
    rotated = siblings(path)[1:]
    assert len(rotated) == 3
    assert [n.removesuffix(".gz") for n in rotated] == [f"0.log.{stamp(clock.now + k)}" for k in range(3)]
    assert gzip.decompress((tmp_path / rotated[0]).read_bytes()).startswith(b"round 0")
    assert (tmp_path / rotated[2]).read_bytes().startswith(b"round 2")


def test_rotator_rejects_bad_policy():
    with pytest.raises(ValueError, match="container-log-max-files 1: must be at least 2"):
        LogRotator(object(), max_size=10, max_files=1)
    with pytest.raises(ValueError, match="container-log-max-size"):
        LogRotator(object(), max_size=0, max_files=5)


async def test_rotation_with_the_fake_runtime(tmp_path):
    """The real client against the in-process CRI server: reopen recreates the file."""
    from cri import api_pb2 as pb
    from cri.client import CriClient
    from cri.fake import FakeRuntime

    async with FakeRuntime() as fake:
        async with CriClient(fake.endpoint) as cri:
            sandbox_config = pb.PodSandboxConfig(
                metadata=pb.PodSandboxMetadata(name="p", namespace="default", uid="u1", attempt=0),
                log_directory=str(tmp_path),
            )
            sandbox_id = await cri.run_pod_sandbox(sandbox_config)
            images = await cri.list_images()
            image = images[0].repo_tags[0] if images[0].repo_tags else images[0].id
            container_id = await cri.create_container(
                sandbox_id,
                pb.ContainerConfig(
                    metadata=pb.ContainerMetadata(name="c", attempt=0),
                    image=pb.ImageSpec(image=image),
                    command=["sleep", "1000"],
                    log_path="c/0.log",
                ),
                sandbox_config,
            )
            await cri.start_container(container_id)
            path = tmp_path / "c" / "0.log"
            path.parent.mkdir(exist_ok=True)
            append(path, rec(0, "q" * 300))
            await LogRotator(cri, max_size=100, max_files=2).rotate([(container_id, str(path))])
            names = siblings(path)
            assert len(names) == 2 and path.exists() and path.stat().st_size < 300
