"""Tests of the tern Python package (run by CI: pytest crates/tern-py/tests)."""

import sys
import threading

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
    seen = []

    def use():
        try:
            txn.put(b"k", b"v")
        except BaseException as e:  # PyO3 raises RuntimeError for unsendable objects
            seen.append(type(e).__name__)

    t = threading.Thread(target=use)
    t.start()
    t.join()
    assert seen, "using a transaction from another thread must raise"
    txn.abort()


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
