"""A real Ceph cluster on RAM, started and stopped by the tests (no mocks).

One rados cluster (module fixture) serves most tests; a second one runs beside it for the
isolation test; the s3 and cephfs backends get their own short-lived clusters. Every teardown is
checked by PID (no daemon of the deployment alive) and by path (no node folder in /dev/shm, no
state folder, no mount). The OSD-kill test runs last on the shared cluster.
"""
import hashlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import HPCSUITE, MPIEXEC
from hpcsuite.staging import CHUNK, ChecksumError, StagingError, down, open_store, status, up
from hpcsuite.staging import procs

xxhash = pytest.importorskip("xxhash")
EDGES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 3]     # around the 4 MiB chunks

pytestmark = [pytest.mark.skipif(not Path("/usr/bin/ceph-mon").exists(), reason="Ceph not installed "
                                 "(scripts/setup.sh installs it)"), pytest.mark.timeout(240)]


def _processes_mentioning(text: str) -> list[int]:
    """PIDs of live (non-zombie) processes whose command line contains ``text``."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != os.getpid():
            try:
                if text in p.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace") \
                        and procs.alive(procs.Proc("?", int(p.name), 0, "")):
                    out.append(int(p.name))
            except OSError:
                pass
    return out


def _all_daemons(d: Path) -> list[procs.Proc]:
    st = json.loads((d / "state.json").read_text())
    found = [procs.Proc(**x) for x in st["daemons"]]
    for f in (Path(st["node_dir"]) / "pids").glob("*.json"):
        found.append(procs.Proc(**json.loads(f.read_text())))
    return found


def _down_and_check(d: Path):
    """stage down, then assert by PID and by path that nothing is left."""
    st = json.loads((d / "state.json").read_text())
    daemons = _all_daemons(d)
    t0 = time.monotonic()
    down(d)
    took = time.monotonic() - t0
    assert not [p.name for p in daemons if procs.alive(p)], "daemons still running after stage down"
    assert not _processes_mentioning(st["conf"]), "a process still uses the deployment's ceph.conf"
    assert not Path(st["node_dir"]).exists() and not d.exists()
    if st.get("mount"):
        assert not os.path.ismount(st["mount"])
    assert down(d) == []                       # idempotent
    return took


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("ceph") / "dep"
    st = up(d, "rados", osd_bytes=1 << 30, timeout=90, log=lambda m: None)
    yield d, st
    if (d / "state.json").exists():
        _down_and_check(d)


def test_deploy_is_private_and_healthy(cluster):
    d, st = cluster
    assert oct(d.stat().st_mode & 0o777) == "0o700"
    assert oct(Path(st["node_dir"]).stat().st_mode & 0o777) == "0o700"
    for k in d.glob("*.keyring"):
        assert oct(k.stat().st_mode & 0o777) == "0o600"
    conf = (d / "ceph.conf").read_text()
    assert "auth cluster required = cephx" in conf and "127.0.0.1" in conf
    s = status(d)
    assert s["health"] in ("HEALTH_OK", "HEALTH_WARN") and s["osds_up"] == 1 and all(s["daemons"].values())
    assert set(s["pgs"]) == {"active+clean"}
    print(f"deploy took {st['deploy_seconds']} s")


def test_round_trips_large_and_many_small(cluster, tmp_path):
    d, _ = cluster
    rng = np.random.default_rng(7)
    with open_store(d) as s:
        a = rng.random((300, 257))
        s.put_array("arr", a)
        np.testing.assert_array_equal(s.get_array("arr"), a)
        big = tmp_path / "big.bin"
        data = rng.integers(0, 256, (40 << 20) + 12345, dtype=np.uint8).tobytes()   # 11 chunks
        big.write_bytes(data)
        info = s.put_file("dir/big", big)
        assert info.checksum == xxhash.xxh3_128_hexdigest(data) and info.algorithm == "xxh3-128"
        s.get_file("dir/big", tmp_path / "back.bin")
        assert (tmp_path / "back.bin").read_bytes() == data
        payloads = {f"small/{i:03d}": rng.bytes(int(rng.integers(0, 3000))) for i in range(200)}
        for n, b in payloads.items():
            s.put_bytes(n, b)
        assert s.list("small/") == sorted(payloads)
        assert all(s.get_bytes(n) == b for n, b in payloads.items())
        s.put_bytes("dir/big", b"replaced")                 # a new generation replaces the chunks
        assert s.get_bytes("dir/big") == b"replaced"
        s.delete("dir/big")
        assert not s.exists("dir/big")


def test_cli_stage_in_out_status(cluster, run, tmp_path):
    d, _ = cluster
    src = tmp_path / "t"
    src.mkdir()
    for i in range(5):
        (src / f"f{i}").write_bytes(os.urandom(100000 * i))
    p = run([MPIEXEC, "-n", "2", HPCSUITE, "stage", "in", src, "--name", "cli", "--dir", d])
    assert p.returncode == 0 and "5 object(s)" in p.stdout, p.stderr
    p = run([MPIEXEC, "-n", "2", HPCSUITE, "stage", "out", "cli", tmp_path / "o", "--dir", d])
    assert p.returncode == 0, p.stderr
    for i in range(5):
        assert (tmp_path / "o" / f"f{i}").read_bytes() == (src / f"f{i}").read_bytes()
    p = run([HPCSUITE, "stage", "status", "--dir", d])
    assert p.returncode == 0 and "1/1 up" in p.stdout, p.stdout


def test_port_taken_fails_clearly_and_cleans_up(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        before = set(Path("/dev/shm").glob("hpcsuite-ceph-*"))
        t0 = time.monotonic()
        with pytest.raises(StagingError) as ei:
            up(tmp_path / "bad", "rados", mon_port=port, timeout=20, log=lambda m: None)
        took = time.monotonic() - t0
    msg = str(ei.value)
    assert "mon.a" in msg and str(tmp_path / "bad" / "logs") in msg, msg
    assert took < 25
    assert set(Path("/dev/shm").glob("hpcsuite-ceph-*")) == before
    assert not _processes_mentioning(str(tmp_path / "bad"))
    assert not (tmp_path / "bad" / "state.json").exists()
    assert down(tmp_path / "bad") == []


def test_two_deployments_do_not_interfere(cluster, tmp_path):
    d1, st1 = cluster
    d2 = tmp_path / "second"
    st2 = up(d2, "rados", osd_bytes=256 << 20, objectstore="memstore", timeout=90, log=lambda m: None)
    try:
        assert set(st1["ports"]).isdisjoint(st2["ports"]) and st1["node_dir"] != st2["node_dir"]
        with open_store(d1) as a, open_store(d2) as b:
            a.put_bytes("same-name", b"first")
            b.put_bytes("same-name", b"second")
            assert a.get_bytes("same-name") == b"first" and b.get_bytes("same-name") == b"second"
            assert "small/000" not in b.list()
    finally:
        _down_and_check(d2)
    assert status(d1)["osds_up"] == 1            # the first one did not notice


def _flipped(raw: bytes, at: int) -> bytes:
    b = bytearray(raw)
    b[at] ^= 0x20
    return bytes(b)


def _data_objects(s, name: str) -> list[str]:
    """The chunk objects of ``name`` (every generation) in the data namespace."""
    return sorted(o.key for o in s.data.list_objects() if o.key.startswith(name + "@"))


def test_chunk_edges_batches_and_replacement(cluster, tmp_path):
    d, _ = cluster
    rng = np.random.default_rng(5)
    with open_store(d) as s:
        for size in EDGES:
            data = rng.bytes(size)
            assert s.put_bytes("e/put", data).checksum == xxhash.xxh3_128_hexdigest(data)
            with s.writer("e/stream", checksum="sha256") as w:      # odd pieces across the chunks
                for i in range(0, size, 1000003):
                    w.write(data[i:i + 1000003])
            assert w.result.checksum == hashlib.sha256(data).hexdigest()
            assert s.get_bytes("e/put") == data and s.get_bytes("e/stream") == data
            with s.open("e/stream") as f:
                assert b"".join(iter(lambda: f.read(777777), b"")) == data
            s.get_file("e/put", tmp_path / "out")
            assert (tmp_path / "out").read_bytes() == data
            # one head (the first chunk and the record) plus one object per further 4 MiB
            assert len(_data_objects(s, "e/put")) == max(0, -(-size // CHUNK) - 1)
        items = {f"e/many/{i}": rng.bytes(n) for i, n in enumerate(EDGES + [10, 3000])}
        infos = s.put_many(items)
        assert [i.checksum for i in infos] == [xxhash.xxh3_128_hexdigest(b) for b in items.values()]
        assert s.get_many(list(items)) == list(items.values())
        again = {k: v[::-1] for k, v in items.items()}                # replace every one of them
        s.put_many(again)
        assert s.get_many(list(again)) == list(again.values())
        big = f"e/many/{len(EDGES) - 1}"
        assert len(_data_objects(s, big)) == 2                        # the old generation is gone
        s.put_bytes(big, b"small now")
        assert s.get_bytes(big) == b"small now" and _data_objects(s, big) == []
        with pytest.raises(StagingError, match="no object 'e/none'"):
            s.get_many(["e/put", "e/none"])
        for n in list(items) + ["e/put", "e/stream"]:
            s.delete(n)
        assert s.list("e/") == [] and _data_objects(s, "e/") == []


@pytest.mark.parametrize("alg", ["xxh3-128", "sha256"])
def test_flipped_byte_is_refused_in_head_and_chunk(cluster, tmp_path, alg):
    d, _ = cluster
    data = np.random.default_rng(6).bytes(2 * CHUNK + 3)
    with open_store(d, checksum=alg) as s:
        for where in ("head", "chunk"):
            s.put_bytes("f/x", data)
            obj, io = ("f/x", s.meta) if where == "head" else (_data_objects(s, "f/x")[0], s.data)
            io.write_full(obj, _flipped(io.read(obj, 2 * CHUNK), 1234))    # (xattrs stay)
            dest = tmp_path / "dest"
            dest.write_bytes(b"old")
            with pytest.raises(ChecksumError, match=f"checksum mismatch \\({alg} "):
                s.get_file("f/x", dest)
            assert dest.read_bytes() == b"old"
            for read in (lambda: s.get_bytes("f/x"), lambda: s.get_many(["f/x"]),
                         lambda: s.open("f/x").read(), lambda: s.get_array("f/x")):
                with pytest.raises(ChecksumError, match="checksum mismatch"):
                    read()
        s.put_bytes("f/small", data[:1000])
        s.meta.write_full("f/small", _flipped(s.meta.read("f/small", 2 * CHUNK), 999))
        with pytest.raises(ChecksumError):
            s.get_many(["f/small"])
        s.delete("f/x")
        s.delete("f/small")


def test_heads_of_the_first_form_still_read(cluster):
    """Objects committed by the first rados layout: a JSON head with ``sha256`` in namespace
    ``meta``, every chunk ``0 .. n-1`` in namespace ``data``."""
    d, _ = cluster
    data = np.random.default_rng(8).bytes(CHUNK + 77)
    with open_store(d) as s:
        head = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "gen": "0123456789ab",
                "n": 2, "chunk": CHUNK}
        s.data.write_full("old@0123456789ab/0", data[:CHUNK])
        s.data.write_full("old@0123456789ab/1", data[CHUNK:])
        s.meta.write_full("old", json.dumps(head).encode())
        info = s.info("old")
        assert (info.size, info.algorithm, info.checksum) == (len(data), "sha256", head["sha256"])
        assert s.get_bytes("old") == data and s.get_many(["old"]) == [data] and "old" in s.list()
        s.data.write_full("old@0123456789ab/1", _flipped(data[CHUNK:], 3))
        with pytest.raises(ChecksumError, match="checksum mismatch \\(sha256 "):
            s.get_bytes("old")
        s.put_bytes("old", b"new")                        # replacing it removes its chunks
        assert s.get_bytes("old") == b"new" and _data_objects(s, "old") == []
        s.delete("old")


def test_osd_killed_during_stage_out_errors_in_bounded_time(cluster, tmp_path, run):
    """Last on the shared cluster: it kills its OSD."""
    d, _ = cluster
    with open_store(d, timeout=5) as s:
        s.put_bytes("victim", os.urandom(96 << 20))
        f = s.open("victim")
        f.read(4 << 20)                                    # the stage-out is under way
        osd = next(p for p in _all_daemons(d) if p.name.startswith("osd."))
        os.kill(osd.pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(StagingError, match="timed out"):
            while f.read(4 << 20):
                pass
        took = time.monotonic() - t0
        with pytest.raises(StagingError):
            s.get_file("victim", tmp_path / "never")
        assert not (tmp_path / "never").exists()
    assert took < 20, took
    assert status(d)["daemons"][osd.name] is False
    p = run([HPCSUITE, "stage", "status", "--dir", d])
    assert p.returncode == 1 and f"NOT RUNNING: {osd.name}" in p.stdout, p.stdout + p.stderr
    took_down = _down_and_check(d)
    assert took_down < 10


@pytest.mark.parametrize("backend", ["s3", "cephfs"])
def test_s3_and_cephfs_round_trip(backend, tmp_path, run):
    d = tmp_path / backend
    up(d, backend, osd_bytes=1 << 30, timeout=120, log=lambda m: None)
    try:
        rng = np.random.default_rng(11)
        with open_store(d) as s:
            data = rng.bytes((20 << 20) + 3)
            s.put_bytes("big", data)
            assert s.get_bytes("big") == data and s.info("big").checksum == xxhash.xxh3_128_hexdigest(data)
            for alg in ("xxh3-128", "sha256"):                 # a flipped byte is refused on read
                s.put_bytes("bad", data[:100000], checksum=alg)
                if backend == "s3":
                    s.s3.put_object(Bucket=s.bucket, Key="data/bad", Body=_flipped(data[:100000], 99999))
                else:
                    p = s.path("bad")
                    p.write_bytes(_flipped(p.read_bytes(), 99999))
                with pytest.raises(ChecksumError, match=f"checksum mismatch \\({alg} "):
                    s.get_bytes("bad")
                with pytest.raises(ChecksumError):
                    s.get_many(["big", "bad"])
            a = rng.random((17, 5)).astype(np.float32)
            s.put_array("x/arr", a)
            np.testing.assert_array_equal(s.get_array("x/arr"), a)
            for i in range(50):
                s.put_bytes(f"m/{i}", bytes([i]) * i)
            assert s.list("m/") == sorted(f"m/{i}" for i in range(50))
            assert all(s.get_bytes(f"m/{i}") == bytes([i]) * i for i in range(50))
            if backend == "cephfs":
                # POSIX on the mount: parallel HDF5 from 2 ranks, read back serially
                h5 = s.path("par.h5")
                prog = ("import h5py, numpy as np; from mpi4py import MPI; c = MPI.COMM_WORLD\n"
                        f"f = h5py.File({str(h5)!r}, 'w', driver='mpio', comm=c)\n"
                        "d = f.create_dataset('x', (2, 1000), 'f8')\n"
                        "with d.collective: d[c.rank] = np.arange(1000) * (c.rank + 1)\nf.close()\n")
                p = run([MPIEXEC, "-n", "2", sys.executable, "-c", prog], timeout=60)
                assert p.returncode == 0, p.stderr
                import h5py
                with h5py.File(h5, "r") as f:
                    np.testing.assert_array_equal(f["x"][1], np.arange(1000) * 2)
                assert s.commit_path("par.h5").size == h5.stat().st_size
    finally:
        _down_and_check(d)


def test_epilog_cleans_up_after_a_killed_job(run):
    """A job that ends without stage down: the epilog finds its daemons and RAM by the job id."""
    job = "987654"
    env = {"SLURM_JOB_ID": job, "HPCSUITE_STAGE_DIR": ""}
    p = run([HPCSUITE, "stage", "up", "--backend", "cephfs", "--osd-size", "512M"], env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    d = Path(f"/dev/shm/hpcsuite-stage-{os.getuid()}-job{job}")
    st = json.loads((d / "state.json").read_text())
    daemons = _all_daemons(d)
    assert {"mon.a", "mgr.x", "mds.a", "ceph-fuse", "osd.0"} <= {x.name for x in daemons}
    assert os.path.ismount(st["mount"])
    p = run(["bash", Path(__file__).resolve().parents[2] / "jobscripts" / "stage-epilog.sh", job], timeout=60)
    assert p.returncode == 0 and "removed" in p.stdout, p.stdout + p.stderr
    assert not [x.name for x in daemons if procs.alive(x)]
    assert not _processes_mentioning(st["conf"])
    assert not os.path.ismount(st["mount"]) and not Path(st["node_dir"]).exists() and not d.exists()
