"""Tests of the tern Python package (run by CI: pytest crates/tern-py/tests)."""

import subprocess
import sys
import textwrap
import threading
import time

import pytest

import tern


@pytest.fixture
def db(tmp_path):
    d = tern.open(str(tmp_path / "db"), durability="nosync")
    yield d
    d.close()


def test_put_get_delete_and_mapping_protocol(db):
    with db.begin() as txn:
        txn[b"apple"] = b"red"
        txn.put(b"banana", b"yellow")
        txn[bytes(range(256))] = bytes(reversed(range(256)))
    with db.begin_read() as txn:
        assert txn[b"apple"] == b"red"
        assert txn.get(b"banana") == b"yellow"
        assert txn.get(b"cherry") is None
        assert txn.get(b"cherry", b"none") == b"none"
        assert txn[bytes(range(256))] == bytes(reversed(range(256)))
        assert b"apple" in txn and b"cherry" not in txn
        with pytest.raises(KeyError):
            txn[b"cherry"]
        assert txn.read_only
    with db.begin() as txn:
        del txn[b"apple"]
        assert not txn.delete(b"apple")
        with pytest.raises(KeyError):
            del txn[b"apple"]
    with db.begin_read() as txn:
        assert txn.get(b"apple") is None


def test_an_exception_aborts_and_success_commits(db):
    with pytest.raises(RuntimeError):
        with db.begin() as txn:
            txn[b"k"] = b"lost"
            raise RuntimeError("boom")
    with db.begin_read() as txn:
        assert txn.get(b"k") is None
    txn = db.begin()
    txn[b"k"] = b"kept"
    txn.commit()
    with pytest.raises(tern.TransactionError):
        txn.put(b"k", b"late")
    with db.begin_read() as txn:
        assert txn[b"k"] == b"kept"


def test_ranges_both_ways_across_batches(db):
    keys = [b"%05d" % i for i in range(1000)]
    with db.begin() as txn:
        for k in keys:
            txn[k] = k + b"!"
    with db.begin_read() as txn:
        assert [k for k, _ in txn.range()] == keys
        assert [k for k, _ in txn.range(reverse=True)] == keys[::-1]
        assert [k for k, _ in txn.range(b"00100", b"00600")] == keys[100:600]
        assert [k for k, _ in txn.range(b"00100", b"00600", reverse=True)] == keys[100:600][::-1]
        assert all(v == k + b"!" for k, v in txn.range(b"00990"))
        assert list(txn.range(b"x")) == []


def test_tables_and_errors(db):
    db.create_table("fruit")
    with pytest.raises(tern.TableExistsError):
        db.create_table("fruit")
    assert db.table_names() == ["", "fruit"]
    with db.begin() as txn:
        txn.put(b"fig", b"purple", table="fruit")
        with pytest.raises(tern.NoSuchTableError):
            txn.put(b"x", b"y", table="nuts")
        with pytest.raises(ValueError):
            txn.put(b"", b"empty keys are refused")
    with db.begin_read() as txn:
        assert txn.get(b"fig", table="fruit") == b"purple"
        assert txn.get(b"fig") is None
        with pytest.raises(tern.ReadOnlyError):
            txn.put(b"a", b"b")
    assert issubclass(tern.ConflictError, tern.Error)


def test_conflicting_writers_get_a_conflict(db):
    with db.begin() as setup:
        setup[b"k"] = b"0"
    first = db.begin()
    second = db.begin()
    first[b"k"] = b"1"
    first.commit()
    with pytest.raises(tern.ConflictError):
        second[b"k"] = b"2"
    second.abort()


def test_a_transaction_stays_on_its_thread(db):
    txn = db.begin()
    txn[b"mine"] = b"1"
    it = txn.range()
    seen = []

    def use():
        for attempt in (
            lambda: txn.put(b"k", b"v"),
            lambda: txn.get(b"mine"),
            lambda: txn.range(),
            lambda: next(it),
            txn.commit,
            txn.abort,
        ):
            try:
                attempt()
            except RuntimeError as e:  # exactly what the docs promise, no BaseException
                seen.append(e)

    t = threading.Thread(target=use)
    t.start()
    t.join()
    assert [type(e) for e in seen] == [RuntimeError] * 6, seen
    assert "only on the thread that began it" in str(seen[0])
    assert txn.read_only is False  # an attribute, readable anywhere
    assert txn[b"mine"] == b"1"  # nothing happened to it
    assert next(it) == (b"mine", b"1")
    txn.abort()


def run_script(tmp_path, code, timeout=60):
    """Runs `code` in a fresh interpreter (DB is a database path in tmp_path): a hang fails the
    test instead of stalling the run. Returns its stdout; its stderr must be empty (no panic
    message, no PyO3 warning)."""
    code = "import tern, threading, time\nDB = %r\n" % str(tmp_path / "db") + textwrap.dedent(code)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail("hung (killed after %d s); output so far: %r %r" % (timeout, e.stdout, e.stderr))
    assert out.returncode == 0 and out.stderr == "", out.stdout + out.stderr
    return out.stdout


def test_another_thread_gets_a_runtime_error_and_no_panic(tmp_path):
    out = run_script(
        tmp_path,
        """
        db = tern.open(DB)
        txn = db.begin()
        def use():
            try:
                txn.put(b"k", b"v")
            except RuntimeError as e:
                print(type(e).__name__)
        t = threading.Thread(target=use); t.start(); t.join()
        txn.abort(); db.close()
        """,
    )
    assert out == "RuntimeError\n"


def test_two_writers_on_one_thread_time_out(db):
    first = db.begin()
    second = db.begin(lock_timeout=0.05)
    first[b"k"] = b"1"
    start = time.monotonic()
    with pytest.raises(tern.LockTimeoutError):
        second[b"k"] = b"2"
    assert 0.045 <= time.monotonic() - start < 10
    third = db.begin(lock_timeout=0)
    start = time.monotonic()
    with pytest.raises(tern.LockTimeoutError):  # no wait at all
        third[b"k"] = b"3"
    assert time.monotonic() - start < 1
    third.abort()
    first.abort()
    second[b"k"] = b"2"  # a timed-out transaction is still usable
    second.commit()
    with db.begin_read() as txn:
        assert txn[b"k"] == b"2"
    for bad in (-1, -0.5, float("nan"), float("inf"), 1e300):
        with pytest.raises(ValueError):
            db.begin(lock_timeout=bad)
    with pytest.raises(TypeError):
        db.begin(lock_timeout="1")


def test_the_same_thread_waiting_for_itself_hangs_only_without_a_timeout(tmp_path):
    # The documented hazard, bounded: with a timeout the second writer gets LockTimeoutError.
    out = run_script(
        tmp_path,
        """
        db = tern.open(DB)
        a = db.begin(); b = db.begin(lock_timeout=0.1)
        a.put(b"k", b"a")
        try:
            b.put(b"k", b"b")
        except tern.LockTimeoutError:
            print("timed out")
        a.abort(); b.abort(); db.close()
        """,
    )
    assert out == "timed out\n"


def test_a_transaction_left_by_an_exited_thread_is_aborted(tmp_path):
    # The auditor's case: begun and left unfinished by a thread that exits, dropped on another.
    out = run_script(
        tmp_path,
        """
        db = tern.open(DB)
        box = []
        def worker():
            t = db.begin(); t.put(b"k", b"from worker"); box.append(t)
        th = threading.Thread(target=worker); th.start(); th.join()
        try:
            box[0].put(b"k", b"late")
        except RuntimeError:
            print("its thread is gone")
        box.clear()
        with db.begin(lock_timeout=10) as t:
            t.put(b"k", b"main")
        with db.begin_read() as t:
            print(t[b"k"].decode())
        db.close()
        """,
    )
    assert out == "its thread is gone\nmain\n"


def test_a_transaction_dropped_on_another_thread_is_aborted_by_its_own(tmp_path):
    # The owner lives on: it aborts the orphan at its next call into tern. Until then the
    # orphan keeps its locks (the documented limit).
    out = run_script(
        tmp_path,
        """
        db = tern.open(DB)
        orphan = db.begin(); orphan.put(b"k", b"orphan")
        box = [orphan]; del orphan
        go, done = threading.Event(), threading.Event()
        def other():
            box.clear()  # the last reference, dropped on this thread
            go.wait()
            try:
                with db.begin(lock_timeout=0.05) as t:
                    t.put(b"k", b"other")
            except tern.LockTimeoutError:
                print("still locked while its thread makes no call")
            done.set()
        th = threading.Thread(target=other); th.start()
        time.sleep(0.1)
        go.set(); done.wait()
        th.join()
        db.table_names()  # any call into tern on the owning thread ends the orphan
        def write():
            with db.begin(lock_timeout=10) as t:
                t.put(b"k", b"other")
        th = threading.Thread(target=write); th.start(); th.join()
        with db.begin_read() as t:
            print(t[b"k"].decode())
        db.close()
        """,
    )
    assert out == "still locked while its thread makes no call\nother\n"


def test_the_database_closes_after_a_transaction_dropped_on_another_thread(tmp_path):
    # The auditor's case: the thread that began it exits; the database then closes for good.
    out = run_script(
        tmp_path,
        """
        def reopen():
            # The exiting thread aborts its transactions as the operating system thread ends,
            # which may be a moment after join() returns.
            for _ in range(1000):
                try:
                    return tern.open(DB).close()
                except tern.LockedError:
                    time.sleep(0.01)
            raise AssertionError("the database never closed")
        db = tern.open(DB)
        box = []
        th = threading.Thread(target=lambda: box.append(db.begin())); th.start(); th.join()
        box.clear()
        db.close()
        reopen()
        print("reopened")
        # and with the owner alive: close aborts the orphan first
        db = tern.open(DB)
        box = [db.begin()]
        th = threading.Thread(target=box.clear); th.start(); th.join()
        db.close()
        tern.open(DB).close()
        print("reopened")
        """,
    )
    assert out == "reopened\nreopened\n"


def test_data_survives_reopen_and_the_directory_is_locked(tmp_path):
    path = str(tmp_path / "db")
    with tern.open(path) as db:
        with db.begin() as txn:
            txn[b"durable"] = b"yes"
        with pytest.raises(tern.LockedError):
            tern.open(path)
    db = tern.open(path)
    with db.begin_read() as txn:
        assert txn[b"durable"] == b"yes"
    db.close()
    with pytest.raises(tern.TransactionError):
        db.begin()


def test_the_readme_example_works_as_written(tmp_path, monkeypatch):
    import pathlib
    import subprocess

    readme = (pathlib.Path(__file__).resolve().parents[3] / "README.md").read_text()
    example = readme.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    out = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, check=True)
    assert out.stdout == "hello = world\nb'hello' b'world'\n", out.stdout + out.stderr
