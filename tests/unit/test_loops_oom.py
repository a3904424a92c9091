"""Loop 3's out-of-memory risk, defined once in ``pack.loops`` ([2.3], [6.2]).

The guide's own case: ``--gpu-memory-utilization 0.95`` with prefix caching on, where
the real use passes 0.9 and the process is OOM-killed. The remedy is 0.85 and
head-room; raising the flag is never the answer on a card without room.
"""

from __future__ import annotations

from inferwatch.pack import loops as L


def test_the_guides_case_is_an_oom_risk() -> None:
    assert L.oom_risk(0.97, prefix_caching=True)
    # the card is as full without prefix caching: no risk named from the ratio alone
    assert not L.oom_risk(0.97, prefix_caching=False)
    assert not L.oom_risk(0.70, prefix_caching=True)
    assert not L.oom_risk(None, prefix_caching=True)


def test_a_restart_that_died_of_out_of_memory_is_an_oom_risk() -> None:
    assert L.oom_risk(None, None, ["CUDA error: out of memory"])
    assert L.oom_risk(0.5, False, ["OOMKilled"])
    assert not L.oom_risk(0.5, False, ["Completed", "Error"])


def test_no_room_means_never_raise() -> None:
    assert not L.card_has_room(0.97)
    assert not L.card_has_room(L.OOM_RISK_USED_RATIO)
    assert not L.card_has_room(None)
    assert L.card_has_room(0.80)


def test_the_oom_remedy_lowers_the_flag_to_the_headroom_value() -> None:
    text = L.oom_headroom(0.95, 0.97)
    assert "lower --gpu-memory-utilization from 0.95 to 0.85" in text
    assert "97%" in text
    assert L.GPU_MEMORY_UTILIZATION_HEADROOM == 0.85
    # the preemption remedy names the room it needs
    assert f"NVML below {L.OOM_RISK_USED_RATIO:.0%}" in L.raise_kv_pool(0.8, 0.7)


def test_the_kv_runbooks_carry_the_oom_step_and_never_raise_blind() -> None:
    from inferwatch.pack import runbooks
    from inferwatch.pack.thresholds import load_thresholds

    pages = runbooks.generate(load_thresholds())
    for name in ("InferenceKVCachePreemptions", "InferenceVRAMPressureQueueRising"):
        text = pages[f"runbooks/{name}.md"]
        assert "lower `--gpu-memory-utilization` to 0.85" in text, name
        assert "OOMKilled" in text, name
    for path, text in pages.items():
        for line in text.splitlines():
            if "raise `--gpu-memory-utilization`" in line:
                assert "only where the card has room" in line, (path, line)
