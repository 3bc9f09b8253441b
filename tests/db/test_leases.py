"""Leases (`Database.claim` / `release` / `tally`), against every implementation: tuners
sharing a database split a workload's configs; measured configs are never granted; expired
leases are taken over; concurrent claimer processes never get the same config (SQLite and
PostgreSQL)."""

import json
import multiprocessing
import runpy
import time
from pathlib import Path

import pytest

from akg.db import Record, Tally, lease_owner, owner_is_gone
from akg.errors import DatabaseError

CLAIMER = Path(__file__).with_name("claimer_process.py")


def configs(*tiles):
    return [{"tile": n} for n in tiles]


def canon(*tiles):
    return [f'{{"tile":{n}}}' for n in tiles]


def test_a_claim_gets_free_configs_once_in_order(db):
    assert db.claim("w1", "cpu-test", configs(3, 1, 2, 1), "a", 60) == canon(3, 1, 2)
    assert db.claim("w1", "cpu-test", configs(1, 2, 4), "b", 60) == canon(4)
    assert db.claim("w1", "cpu-test", [], "b", 60) == []


def test_the_same_owner_renews_its_own_leases(db):
    assert db.claim("w1", "cpu-test", configs(1, 2), "a", 60) == canon(1, 2)
    assert db.claim("w1", "cpu-test", configs(2, 3), "a", 60) == canon(2, 3)
    assert db.claim("w1", "cpu-test", configs(1, 2, 3), "b", 60) == []


def test_leases_are_per_workload_and_target(db):
    assert db.claim("w1", "cpu-test", configs(1), "a", 60) == canon(1)
    assert db.claim("w2", "cpu-test", configs(1), "b", 60) == canon(1)
    assert db.claim("w1", "cpu-b", configs(1), "b", 60) == canon(1)


def test_a_measured_config_is_never_granted_and_its_lease_is_moot(db, rec):
    assert db.claim("w1", "cpu-test", configs(1, 2), "a", 60) == canon(1, 2)
    db.add(rec(1, 1.0))
    db.add(rec(5, None, "build_error"))
    assert db.claim("w1", "cpu-test", configs(1, 2, 5, 6), "a", 60) == canon(2, 6)
    assert db.tally("cpu-test", ["w1"], "b") == {"w1": Tally(measured=2, leased=2)}  # 2 and 6, not 1
    assert db.release("a", "w1", "cpu-test", configs(1)) == 0  # already dropped by the claim


def test_an_expired_lease_is_taken_over(db):
    assert db.claim("w1", "cpu-test", configs(1, 2), "crashed", 0.3) == canon(1, 2)
    assert db.claim("w1", "cpu-test", configs(1), "live", 0.3) == []
    assert db.tally("cpu-test", ["w1"], "live")["w1"] == Tally(0, 2)
    time.sleep(0.6)
    assert db.tally("cpu-test", ["w1"], "live")["w1"] == Tally(0, 0)
    assert db.claim("w1", "cpu-test", configs(1), "live", 60) == canon(1)
    assert db.claim("w1", "cpu-test", configs(1, 2), "crashed", 60) == canon(2)  # 1 is live's now


def test_release_drops_only_the_owners_leases(db):
    db.claim("w1", "cpu-test", configs(1, 2, 3), "a", 60)
    db.claim("w2", "cpu-test", configs(1), "a", 60)
    db.claim("w1", "cpu-test", configs(4), "b", 60)
    assert db.release("a", "w1", "cpu-test", configs(1, 4)) == 1
    assert db.claim("w1", "cpu-test", configs(1, 2, 4), "c", 60) == canon(1)
    assert db.release("a", "w1") == 2
    assert db.release("a", target_key="cpu-test", configs=[]) == 0
    assert db.release("a") == 1  # w2's
    assert db.release("nobody") == 0
    assert db.claim("w1", "cpu-test", configs(2, 3, 4), "c", 60) == canon(2, 3)  # b's 4 stands


def test_tally_counts_records_and_other_owners_live_leases(db, rec):
    db.add_many([rec(1), rec(2), rec(3, workload="w2"), rec(4, target="cpu-b")])
    db.claim("w1", "cpu-test", configs(7, 8), "other", 60)
    db.claim("w1", "cpu-test", configs(9), "me", 60)
    tally = db.tally("cpu-test", ["w1", "w2", "w3"], "me")
    assert tally == {"w1": Tally(2, 2), "w2": Tally(1, 0), "w3": Tally(0, 0)}
    assert tally["w1"].holders == {"other"} and not tally["w2"].holders
    assert db.tally("cpu-test", ["w1"], "other") == {"w1": Tally(2, 1)}
    assert db.tally("cpu-test", ["w1"], "other")["w1"].holders == {"me"}
    assert db.tally("cpu-test", [], "me") == {}


@pytest.mark.parametrize("owner, ttl, message", [
    ("", 60, "needs an owner"),
    (None, 60, "needs an owner"),
    ("a", 0, "time to live > 0"),
    ("a", -1, "time to live > 0"),
    ("a", float("inf"), "time to live > 0"),
    ("a", "60", "time to live > 0"),
])
def test_a_bad_lease_is_a_database_error(db, owner, ttl, message):
    with pytest.raises(DatabaseError, match=message):
        db.claim("w1", "cpu-test", configs(1), owner, ttl)
    with pytest.raises(DatabaseError, match="not JSON|a config is a JSON object"):
        db.claim("w1", "cpu-test", ["not json"], "a", 60)


def test_lease_owners_name_the_host_and_process_and_differ():
    import os
    import socket

    a, b = lease_owner(), lease_owner()
    assert a != b and a.startswith(f"{socket.gethostname()}:{os.getpid()}:")


def test_an_owner_is_gone_only_when_it_was_a_process_of_this_host_that_ended():
    import os
    import socket
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    assert owner_is_gone(f"{host}:{dead.pid}:abcd")
    assert not owner_is_gone(lease_owner())  # this process
    assert not owner_is_gone(f"{host}:{os.getppid()}:abcd")  # alive
    assert not owner_is_gone(f"another-{host}:{dead.pid}:abcd")  # other hosts' leases expire
    assert not owner_is_gone("farm-a")  # not a lease_owner() name
    assert not owner_is_gone(f"{host}:99999999999999999999:x")


@pytest.mark.timeout(300)
def test_concurrent_claimer_processes_never_share_a_config(sql_url, tmp_path):
    """Four processes race for the same 120 configs (all leased at once), then walk 100 more
    like tuners (claim a few, record them, release): every config goes to exactly one."""
    workers = 4
    first = configs(*range(120))
    second = configs(*range(1000, 1100))
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(workers)
    processes = []
    for worker in range(workers):
        params = {"URL": sql_url, "WORKER": worker, "FIRST": first, "SECOND": second, "BARRIER": barrier,
                  "RESULT": str(tmp_path / f"claims{worker}.json")}
        p = ctx.Process(target=runpy.run_path, args=(str(CLAIMER),), kwargs={"init_globals": params})
        p.start()
        processes.append(p)
    for p in processes:
        p.join(timeout=240)
    assert [p.exitcode for p in processes] == [0] * workers
    results = [json.loads((tmp_path / f"claims{w}.json").read_text()) for w in range(workers)]
    leased = [c for r in results for c in r["leased"]]
    assert len(leased) == len(set(leased)) == 120 and set(leased) == set(canon(*range(120)))
    measured = [c for r in results for c in r["measured"]]
    assert len(measured) == len(set(measured)) == 100 and sum(r["new"] for r in results) == 100
    assert sum(1 for r in results if r["measured"]) >= 2  # the work was split, not done by one
