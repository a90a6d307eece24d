# SPDX-License-Identifier: Apache-2.0
"""The fault suite's checker (checker.py) on hand-made histories: each
anomaly it must flag, and the look-alikes it must not.  No namespaces, no
daemons: these run anywhere."""

import json

from checker import check, load_history

S = 1_000_000_000          # ns per second
HANG = 30 * S


def w(op, key, ver, start, end, rc=0, proc="a#1"):
    return {"proc": proc, "op": op, "key": key, "ver": ver, "start": start * S,
            "end": None if end is None else end * S, "rc": None if end is None else rc}


def rd(key, start, end, st="ok", ver=None, rc=None, op="get", proc="b#1", **res):
    r = {"st": st}
    if ver is not None:
        r["v"] = ver
    r.update(res)
    if end is None:                       # never returned: no status, no bytes
        return {"proc": proc, "op": op, "key": key, "start": start * S, "end": None,
                "rc": None}
    return {"proc": proc, "op": op, "key": key, "start": start * S, "end": end * S,
            "rc": rc if rc is not None else (0 if st == "ok" else None), "res": r}


def rm(key, start, end, rc=0, force=False, proc="c#1"):
    return {"proc": proc, "op": "remove", "key": key, "start": start * S,
            "end": None if end is None else end * S, "rc": None if end is None else rc,
            "force": force}


def final(key, start, end, st="miss", ver=None, rc=-704):
    return rd(key, start, end, st=st, ver=ver, rc=rc if st == "miss" else 0, op="final",
              proc="d#1")


def fault(kind, start, end, loses=False, lose_until=None, proc=None):
    f = {"kind": kind, "start": start * S, "end": end * S, "loses": loses}
    if lose_until is not None:
        f["lose_until"] = lose_until * S
    if proc:
        f["proc"] = proc
    return f


def anomalies(ops, faults=()):
    rep = check(ops, list(faults), hang_ns=HANG)
    return {k: v for k, v in rep.anomalies.items() if v}, rep


def test_clean_sequential_history_has_no_anomaly():
    ops = [w("put", "k", 1, 0, 1), rd("k", 2, 3, ver=1),
           w("upsert", "k", 2, 4, 5), rd("k", 6, 7, ver=2),
           rm("k", 8, 9), rd("k", 10, 11, st="miss"),
           w("put", "k", 3, 12, 13), final("k", 20, 21, st="ok", ver=3)]
    found, rep = anomalies(ops)
    assert found == {}, rep.details()
    assert rep.stats["reads_ok"] == 3 and rep.stats["reads_miss"] == 1
    assert rep.stats["acked_writes"] == 3


def test_old_value_after_an_acknowledged_upsert_is_stale():
    ops = [w("put", "k", 1, 0, 1), w("upsert", "k", 2, 2, 3, proc="c#1"), rd("k", 4, 5, ver=1)]
    found, rep = anomalies(ops)
    assert found == {"stale": 1}
    assert "upsert" in rep.examples["stale"][0]


def test_old_value_during_a_concurrent_upsert_is_not_stale():
    # the upsert had not returned when the read began: either order is fine
    ops = [w("put", "k", 1, 0, 1), w("upsert", "k", 2, 2, 5), rd("k", 4, 6, ver=1)]
    assert anomalies(ops)[0] == {}


def test_value_whose_write_overlapped_the_newer_one_is_not_stale():
    # v1 and v2 were written concurrently: v2 may have landed first
    ops = [w("upsert", "k", 1, 0, 3), w("upsert", "k", 2, 2, 4, proc="c#1"),
           rd("k", 5, 6, ver=1)]
    assert anomalies(ops)[0] == {}


def test_value_after_an_acknowledged_remove_is_stale():
    ops = [w("put", "k", 1, 0, 1), rm("k", 2, 3, force=True), rd("k", 4, 5, ver=1)]
    assert anomalies(ops)[0] == {"stale": 1}


def test_removes_that_removed_nothing_order_nothing():
    for rc in (-704, -706, -900):
        ops = [w("put", "k", 1, 0, 1), rm("k", 2, 3, rc=rc), rd("k", 4, 5, ver=1)]
        assert anomalies(ops)[0] == {}, rc


def test_failed_upsert_orders_nothing():
    ops = [w("put", "k", 1, 0, 1), w("upsert", "k", 2, 2, 3, rc=-800), rd("k", 4, 5, ver=1)]
    assert anomalies(ops)[0] == {}


def test_acknowledged_put_orders_only_when_it_took_effect():
    # a put of an existing key returns 0 and writes nothing
    base = [w("put", "k", 1, 0, 1), w("put", "k", 2, 2, 3, proc="c#1"), rd("k", 4, 5, ver=1)]
    assert anomalies(base)[0] == {}
    # ... but once some read returned the second put's value, it did
    # take effect after the first value was gone: the old value is stale
    seen = base + [rd("k", 6, 7, ver=2, proc="d#1")]
    found, rep = anomalies(seen)
    assert found == {"stale": 1}, rep.details()


def test_read_from_after_a_remove_then_a_new_put_is_fine():
    ops = [w("put", "k", 1, 0, 1), rm("k", 2, 3), w("put", "k", 2, 4, 5), rd("k", 6, 7, ver=2)]
    assert anomalies(ops)[0] == {}


def test_another_keys_bytes_are_flagged():
    ops = [w("put", "k", 1, 0, 1), w("put", "j", 2, 0, 1),
           rd("k", 2, 3, st="foreign", ver=2, fk="j", head="00")]
    found, rep = anomalies(ops)
    assert found == {"wrong_key": 1}
    assert "of j" in rep.examples["wrong_key"][0]


def test_torn_and_garbage_values_are_flagged():
    ops = [w("put", "k", 1, 0, 1), rd("k", 2, 3, st="torn", ver=1, head="ab"),
           rd("k", 4, 5, st="garbage", head="0000")]
    assert anomalies(ops)[0] == {"torn": 1, "garbage": 1}


def test_version_nobody_wrote_is_a_phantom():
    ops = [w("put", "k", 1, 0, 1), rd("k", 2, 3, ver=7)]
    assert anomalies(ops)[0] == {"phantom": 1}


def test_version_written_after_the_read_ended_is_a_phantom():
    ops = [w("put", "k", 1, 5, 6), rd("k", 2, 3, ver=1)]
    assert anomalies(ops)[0] == {"phantom": 1}


def test_version_of_a_write_still_running_is_fine():
    # the writer was killed mid-put: its value may still have landed
    ops = [w("put", "k", 1, 0, None, proc="a#1"), rd("k", 2, 3, ver=1)]
    assert anomalies(ops, [fault("holder_kill", 1, 2, loses=True, proc="a#1")])[0] == {}


def test_acknowledged_put_missing_at_the_end_is_lost():
    ops = [w("put", "k", 1, 0, 1), final("k", 10, 11)]
    found, rep = anomalies(ops)
    assert found == {"lost": 1} and rep.lost_keys == {"k"}


def test_lost_put_with_a_losing_fault_is_explained():
    ops = [w("put", "k", 1, 0, 1), final("k", 10, 11)]
    found, rep = anomalies(ops, [fault("holder_kill", 3, 4, loses=True, lose_until=9,
                                       proc="x#1")])
    assert found == {}
    assert rep.info["lost_explained"] == 1 and rep.info["lost_explained_by_holder_kill"] == 1


def test_losing_fault_over_before_the_write_explains_nothing():
    ops = [w("put", "k", 1, 5, 6), final("k", 10, 11)]
    found, _ = anomalies(ops, [fault("master_kill", 1, 2, loses=True, lose_until=3)])
    assert found == {"lost": 1}


def test_durable_restart_is_not_a_losing_fault():
    ops = [w("upsert", "k", 1, 0, 1), final("k", 10, 11)]
    assert anomalies(ops, [fault("master_kill", 3, 4, loses=False)])[0] == {"lost": 1}


def test_missing_key_that_may_have_been_removed_is_not_lost():
    for later in (rm("k", 2, 3), rm("k", 2, 3, rc=-900), rm("k", 2, None),
                  w("upsert", "k", 2, 2, 3, rc=-800), rm("k", 0.5, 3)):
        ops = [w("put", "k", 1, 0, 1), later, final("k", 10, 11)]
        # (the remove that never returned: its process was killed)
        assert anomalies(ops, [fault("holder_kill", 4, 5, proc="c#1")])[0] == {}, later


def test_remove_before_the_write_or_refused_does_not_excuse_a_loss():
    for earlier in (rm("k", 0, 1), rm("k", 3, 4, rc=-704), rm("k", 3, 4, rc=-706)):
        ops = [earlier, w("put", "k", 1, 2, 2.5), final("k", 10, 11)]
        assert anomalies(ops)[0] == {"lost": 1}, earlier


def test_final_read_that_failed_is_not_a_loss():
    ops = [w("put", "k", 1, 0, 1), final("k", 10, 11, rc=-900)]
    found, rep = anomalies(ops)
    assert found == {} and rep.info["final_unavailable"] == 1


def test_unacknowledged_write_missing_is_not_lost():
    ops = [w("put", "k", 1, 0, 1, rc=-800), w("upsert", "k", 2, 2, None), final("k", 10, 11)]
    assert anomalies(ops, [fault("holder_kill", 2, 3, proc="a#1")])[0] == {}


def test_operation_that_never_returned_is_hung_unless_its_process_was_killed():
    ops = [w("put", "k", 1, 0, None, proc="a#1")]
    assert anomalies(ops)[0] == {"hung": 1}
    found, rep = anomalies(ops, [fault("holder_kill", 1, 2, loses=True, proc="a#1")])
    assert found == {} and rep.info["killed_in_flight"] == 1


def test_operation_past_the_timeout_is_hung():
    ops = [w("put", "k", 1, 0, 31), rd("k", 40, 69, ver=1)]
    assert anomalies(ops)[0] == {"hung": 1}


def test_summary_names_ops_faults_and_every_anomaly_kind():
    ops = [w("put", "k", 1, 0, 1), w("upsert", "k", 2, 2, 3), rd("k", 4, 5, ver=1)]
    rep = check(ops, [fault("master_kill", 1, 2), fault("master_kill", 5, 6),
                      fault("cut_peers", 3, 4)], hang_ns=HANG)
    line = rep.summary("faults-test", extra={"held_bytes": 0})
    assert "ops=3" in line and "master_kill=2" in line and "cut_peers=1" in line
    for kind in ("wrong_key", "torn", "garbage", "phantom", "stale=1", "lost", "hung",
                 "held_bytes=0"):
        assert kind in line, (kind, line)


def test_load_history_pairs_invocations_with_completions(tmp_path):
    p = tmp_path / "a.jsonl"
    lines = [
        {"t": "i", "p": "a#1", "n": 0, "op": "put", "k": "k", "v": 5, "s": 10},
        {"t": "c", "n": 0, "e": 20, "rc": 0},
        {"t": "i", "p": "a#1", "n": 1, "op": "get_batch", "ks": ["k", "j"], "s": 30},
        {"t": "c", "n": 1, "e": 40, "rc": 0, "rs": [{"st": "ok", "v": 5}, {"st": "miss"}]},
        {"t": "i", "p": "a#1", "n": 2, "op": "remove", "k": "k", "f": True, "s": 50},
    ]
    p.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"t": "c", "n": 2, "e"')
    ops = load_history([str(p), str(tmp_path / "absent.jsonl")])
    assert [(o["op"], o["key"]) for o in ops] == [("put", "k"), ("get_batch", "k"),
                                                  ("get_batch", "j"), ("remove", "k")]
    assert ops[0]["ver"] == 5 and ops[0]["end"] == 20 and ops[0]["rc"] == 0
    assert ops[1]["res"] == {"st": "ok", "v": 5} and ops[2]["res"] == {"st": "miss"}
    assert ops[3]["end"] is None and ops[3]["force"] is True


def test_threads_of_a_killed_process_are_not_hung():
    ops = [w("put", "k", 1, 0, None, proc="a#1"), rd("k", 0.5, None, proc="a#1/r0")]
    found, rep = anomalies(ops, [fault("holder_kill", 1, 2, loses=True, proc="a#1")])
    assert found == {} and rep.info["killed_in_flight"] == 2
