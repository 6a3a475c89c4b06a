"""Frames between slots: plain pickle while it works, cloudpickle once it does not."""

from __future__ import annotations

import pickle

from tidegate.runtime.frames import encode_frame


def test_plain_frames_use_pickle_and_stay_on_it():
    data, plain = encode_frame((0, [1, "a", (2, 3)]), True)
    assert plain is True
    assert pickle.loads(data) == (0, [1, "a", (2, 3)])


def test_a_frame_plain_pickle_cannot_carry_switches_the_transport_to_cloudpickle():
    class DefinedInAJobScript:  # a local class: pickle cannot find it by name
        def __init__(self, x):
            self.x = x

    data, plain = encode_frame((1, [DefinedInAJobScript(7)]), True)
    assert plain is False
    channel, (record,) = pickle.loads(data)
    assert (channel, record.x) == (1, 7)
    # once switched, later frames go straight to cloudpickle (still readable with pickle)
    data, plain = encode_frame((2, [1]), False)
    assert plain is False and pickle.loads(data) == (2, [1])
