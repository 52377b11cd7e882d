"""The staging client API on the tmpfs backend: round trips against the original data (hashlib,
zlib and the xxhash package as the independent checksums), streaming in bounded memory, atomicity,
corruption detection for every checksum algorithm, records of the first (SHA-256 only) form, name
validation, tree staging, batches, and the ``hpcsuite stage`` CLI."""
import hashlib
import json
import os
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

from helpers import HPCSUITE
from hpcsuite.runtime import InputError
from hpcsuite.staging import (CHUNK, ChecksumError, StagingError, TmpfsStore, check_name, checksum,
                              down, open_store, status, up)
from hpcsuite.staging.parallel import deal_by_size

xxhash = pytest.importorskip("xxhash")

#: the checksum of ``data`` under each algorithm, computed by the libraries themselves
REFERENCE = {"xxh3-128": lambda d: xxhash.xxh3_128_hexdigest(d),
             "sha256": lambda d: hashlib.sha256(d).hexdigest(),
             "crc32": lambda d: f"{zlib.crc32(d):08x}"}
#: sizes around the 4 MiB streaming unit (where the chunked paths change course)
EDGES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 3]


@pytest.fixture
def store(tmp_path):
    return TmpfsStore(tmp_path / "store")


def flip_byte(path, at):
    """Change one byte of a stored file behind the store's back."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x20]))


@pytest.mark.parametrize("alg", checksum.ALGORITHMS)
@pytest.mark.parametrize("data", [b"", b"x", os.urandom(CHUNK + 17), bytes(range(256)) * 1000])
def test_bytes_round_trip_with_stored_checksum(store, data, alg):
    info = store.put_bytes("d/b", data, checksum=alg)
    assert info.size == len(data) and info.algorithm == alg and info.checksum == REFERENCE[alg](data)
    assert store.info("d/b") == info
    assert store.get_bytes("d/b") == data


def test_default_and_per_store_checksum(tmp_path):
    assert checksum.default_algorithm() == "xxh3-128"          # xxhash is installed here
    assert TmpfsStore(tmp_path / "a").put_bytes("x", b"1").algorithm == "xxh3-128"
    st = TmpfsStore(tmp_path / "b", checksum="sha256")
    assert st.put_bytes("x", b"1").checksum == hashlib.sha256(b"1").hexdigest()
    assert st.put_bytes("y", b"1", checksum="crc32").algorithm == "crc32"    # per object
    assert st.put_array("z", np.arange(3)).algorithm == "sha256"
    with pytest.raises(InputError, match="checksum must be one of xxh3-128, sha256, crc32; got 'md5'"):
        TmpfsStore(tmp_path / "c", checksum="md5")
    with pytest.raises(InputError, match="checksum must be one of"):
        st.put_bytes("w", b"1", checksum="md5")


def test_without_xxhash_crc32_is_the_default_and_xxh3_objects_say_what_to_install(store, monkeypatch):
    """The fallback when the xxhash package is missing (its module hidden from hpcsuite)."""
    store.put_bytes("fast", b"payload")                         # written with XXH3
    monkeypatch.setattr(checksum, "_xxhash", None)
    assert checksum.default_algorithm() == "crc32" and "zlib" in checksum.describe()
    info = TmpfsStore(store.root).put_bytes("slow", b"payload")
    assert info.algorithm == "crc32" and info.checksum == f"{zlib.crc32(b'payload'):08x}"
    with pytest.raises(InputError, match="pip install xxhash"):
        store.put_bytes("x", b"1", checksum="xxh3-128")
    with pytest.raises(StagingError, match="needs the xxhash package"):
        store.get_bytes("fast")
    assert store.get_bytes("fast", verify=False) == b"payload"


@pytest.mark.parametrize("size", EDGES)
def test_sizes_around_the_chunk_round_trip_on_every_path(store, tmp_path, size):
    data = os.urandom(size)
    with store.writer("w") as w:                               # odd pieces across the boundaries
        for i in range(0, size, 1000003):
            w.write(data[i:i + 1000003])
    assert w.result.checksum == REFERENCE["xxh3-128"](data)
    assert store.get_bytes("w") == data
    with store.open("w") as f:
        assert b"".join(iter(lambda: f.read(777777), b"")) == data
    store.get_file("w", tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == data
    a = np.frombuffer(data[:size - size % 8], dtype=np.float64).reshape(-1, 1)
    store.put_array("a", a)
    np.testing.assert_array_equal(store.get_array("a"), a)


def test_batches_round_trip(store):
    items = {f"b/{i}": os.urandom(s) for i, s in enumerate(EDGES + [10, 3000])}
    infos = store.put_many(items)
    assert [i.name for i in infos] == list(items)
    assert all(i.checksum == REFERENCE["xxh3-128"](items[i.name]) for i in infos)
    assert store.get_many(list(items)) == list(items.values())
    with pytest.raises(StagingError, match="no object 'b/none'"):
        store.get_many(["b/0", "b/none"])
    with pytest.raises(InputError, match="object name"):
        store.put_many([("ok", b"1"), ("../bad", b"2")])


@pytest.mark.parametrize("a", [np.arange(24, dtype=np.int16).reshape(2, 3, 4),
                               np.asfortranarray(np.random.default_rng(1).random((5, 7))),
                               np.random.default_rng(2).random((9, 8))[:, ::3],      # non-contiguous
                               np.array(3.5, dtype=np.float32), np.zeros((0, 4), dtype=np.complex128),
                               np.array([(1, 2.0)], dtype=[("i", "<i4"), ("f", ">f8")])])
def test_arrays_keep_dtype_shape_and_values(store, a):
    store.put_array("arr", a)
    b = store.get_array("arr")
    assert b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(b, a)


def test_object_arrays_are_refused(store):
    with pytest.raises(InputError, match="object arrays"):
        store.put_array("o", np.array([object()]))


def test_list_exists_delete_and_many_small_objects(store):
    names = [f"many/{i:04d}" for i in range(300)]
    for i, n in enumerate(names):
        store.put_bytes(n, i.to_bytes(4, "little"))
    store.put_bytes("other", b"1")
    assert store.list("many/") == names
    assert store.list() == names + ["other"]
    assert all(int.from_bytes(store.get_bytes(n), "little") == i for i, n in enumerate(names))
    store.delete("many/0007")
    store.delete("many/0007")                       # idempotent
    assert not store.exists("many/0007") and store.exists("many/0008")
    with pytest.raises(StagingError, match="no object 'many/0007'"):
        store.get_bytes("many/0007")


def test_large_file_streams_in_bounded_memory(store, tmp_path):
    src = tmp_path / "big.bin"
    rng = np.random.default_rng(3)
    with open(src, "wb") as f:
        for _ in range(12):                          # 48 MiB
            f.write(rng.integers(0, 256, 4 << 20, dtype=np.uint8).tobytes())
    want = REFERENCE["xxh3-128"](src.read_bytes())
    tracemalloc.start()
    info = store.put_file("big", src)
    store.get_file("big", tmp_path / "out.bin")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert info.checksum == want
    assert REFERENCE["xxh3-128"]((tmp_path / "out.bin").read_bytes()) == want
    assert peak < 3 * CHUNK, f"peak Python allocation {peak / 2**20:.1f} MiB for a 48 MiB file"


@pytest.mark.parametrize("alg", checksum.ALGORITHMS)
@pytest.mark.parametrize("at", [0, 5000, CHUNK + 1])
def test_corruption_is_detected_and_destination_left_untouched(store, tmp_path, alg, at):
    store.put_bytes("c", os.urandom(CHUNK + 10000), checksum=alg)
    flip_byte(store.path("c"), at)
    dest = tmp_path / "dest"
    dest.write_bytes(b"old")
    with pytest.raises(ChecksumError, match=f"checksum mismatch \\({alg} "):
        store.get_file("c", dest)
    assert dest.read_bytes() == b"old"
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".dest")]   # no temporary left
    for read in (lambda: store.get_bytes("c"), lambda: store.get_many(["c"]),
                 lambda: store.open("c").read(), lambda: store.get_array("c")):
        with pytest.raises(ChecksumError, match="checksum mismatch"):
            read()
    assert len(store.get_bytes("c", verify=False)) == CHUNK + 10000


def test_truncated_or_grown_object_is_refused(store):
    store.put_bytes("t", b"x" * 1000)
    with open(store.path("t"), "ab") as f:
        f.write(b"y")
    with pytest.raises(ChecksumError, match="1001 bytes, stored size is 1000"):
        store.get_bytes("t")
    with pytest.raises(ChecksumError, match="stored size is 1000"):
        store.open("t").read()


def test_records_of_the_first_form_still_read(store, tmp_path):
    """Objects committed before the algorithm was recorded: ``{"size", "sha256"}`` records."""
    data = os.urandom(CHUNK + 5)
    store.put_bytes("old", data)
    (store.root / "meta" / "old.json").write_text(json.dumps({"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}))
    info = store.info("old")
    assert (info.algorithm, info.checksum) == ("sha256", hashlib.sha256(data).hexdigest())
    assert store.get_bytes("old") == data and store.list() == ["old"]
    store.get_file("old", tmp_path / "o")
    assert (tmp_path / "o").read_bytes() == data
    flip_byte(store.path("old"), 7)
    with pytest.raises(ChecksumError, match="checksum mismatch \\(sha256 "):
        store.get_bytes("old")


def test_aborted_write_leaves_nothing(store):
    store.put_bytes("keep", b"old")
    with pytest.raises(RuntimeError):
        with store.writer("keep") as w:
            w.write(b"new partial")
            raise RuntimeError("writer dies")
    assert store.get_bytes("keep") == b"old"
    assert [f.name for f in store.path("keep").parent.iterdir()] == ["keep"]


@pytest.mark.parametrize("bad", ["", "/abs", "a//b", "../x", "a/./b", ".hidden", "a/.tmp", "x\0y"])
def test_bad_names_are_refused(bad):
    with pytest.raises(InputError, match="object name"):
        check_name(bad)


def test_stage_tree_in_and_out(store, tmp_path):
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    files = {"a.txt": b"alpha", "sub/b.bin": os.urandom(5000), "sub/c": b""}
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    names = store.stage_in(src, "run1")
    assert names == sorted(f"run1/{r}" for r in files)
    out = store.stage_out("run1", tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in out) == sorted(files)
    for rel, data in files.items():
        assert (tmp_path / "out" / rel).read_bytes() == data
    store.stage_out("run1/a.txt", tmp_path / "single.txt")
    assert (tmp_path / "single.txt").read_bytes() == b"alpha"
    with pytest.raises(StagingError, match="no object 'nothing'"):
        store.stage_out("nothing", tmp_path / "x")
    with pytest.raises(InputError, match="no such file"):
        store.stage_in(tmp_path / "missing")


def test_deal_by_size_balances_bytes():
    sizes = [100, 1, 50, 50, 30, 20, 1, 1]
    owner = deal_by_size(sizes, 3)
    loads = [sum(s for s, o in zip(sizes, owner) if o == r) for r in range(3)]
    assert sorted(loads) == [73, 80, 100]          # largest-first greedy: 100 | 50+30 | 50+20+1+1+1
    assert deal_by_size([5, 5], 4) == [0, 1]


def test_deployment_api_tmpfs(tmp_path):
    d = tmp_path / "dep"
    st = up(d, "tmpfs")
    assert st["backend"] == "tmpfs" and oct(d.stat().st_mode & 0o777) == "0o700"
    with pytest.raises(InputError, match="already holds a tmpfs deployment"):
        up(d, "tmpfs")
    with open_store(d) as s:
        s.put_bytes("x", b"123")
    with open_store(d, checksum="crc32") as s:
        assert s.put_bytes("y", b"123").algorithm == "crc32"
    assert status(d)["objects"] == 2
    # the state folder is on disk here: the data still go to node-local RAM, one folder per deployment
    assert st["root"].startswith("/dev/shm/hpcsuite-store-") and Path(st["root"], "data", "x").exists()
    assert down(d) and not d.exists() and not Path(st["root"]).exists()
    assert down(d) == []                                  # idempotent
    with pytest.raises(StagingError, match="no staging deployment"):
        open_store(d)


def test_cli_round_trip_and_errors(run, tmp_path):
    d, src = tmp_path / "dep", tmp_path / "src"
    src.mkdir()
    (src / "f1").write_bytes(os.urandom(3000))
    (src / "f2").write_bytes(b"two")
    p = run([HPCSUITE, "stage", "up", "--dir", d, "--checksum", "sha256"])
    assert p.returncode == 0 and "tmpfs ready" in p.stdout, p.stderr
    p = run([HPCSUITE, "stage", "in", src, "--name", "job", "--dir", d])
    assert p.returncode == 0 and "2 object(s)" in p.stdout, p.stderr
    p = run([HPCSUITE, "stage", "ls", "--dir", d])                  # the deployment's checksum
    assert p.returncode == 0 and p.stdout.count(" sha256:") == 2, p.stdout + p.stderr
    p = run([HPCSUITE, "stage", "out", "job", tmp_path / "back", "--dir", d])
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "back" / "f1").read_bytes() == (src / "f1").read_bytes()
    p = run([HPCSUITE, "stage", "status", "--json", "--dir", d])
    assert p.returncode == 0 and json.loads(p.stdout)["objects"] == 2
    p = run([HPCSUITE, "stage", "out", "nope", tmp_path / "x", "--dir", d])
    assert p.returncode == 1 and p.stderr.strip().count("\n") == 0 and "no object 'nope'" in p.stderr
    p = run([HPCSUITE, "stage", "up", "--backend", "rados", "--osd-size", "lots", "--dir", tmp_path / "o"])
    assert p.returncode == 2 and "--osd-size" in p.stderr
    p = run([HPCSUITE, "stage", "up", "--backend", "nfs"])
    assert p.returncode == 2 and "invalid choice" in p.stderr
    p = run([HPCSUITE, "stage", "up", "--checksum", "md5", "--dir", tmp_path / "o"])
    assert p.returncode == 2 and "--checksum" in p.stderr
    for _ in range(2):
        p = run([HPCSUITE, "stage", "down", "--dir", d])
        assert p.returncode == 0, p.stderr
    assert not d.exists()
    p = run([HPCSUITE, "stage", "--help"])
    assert p.returncode == 0 and "cephfs" in p.stdout and "--dir" in p.stdout
