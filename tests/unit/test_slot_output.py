"""A slot's output on its way to the driver: the line assembly per writing thread
(deploy/slot_output.py) and the worker's forwarding stream and log handler
(runtime/output.py), with a recording control connection."""

from __future__ import annotations

import io
import logging
import sys
import threading

import pytest

from tidegate.deploy.slot_output import LineAssembler, SlotOutputPrinter
from tidegate.runtime.messages import SlotLog, SlotOutput
from tidegate.runtime.output import ForwardingStream, forward_output


class Control:
    """A control connection that records what is sent; `up=False`: the driver is gone."""

    def __init__(self, up: bool = True) -> None:
        self.up = up
        self.sent: list[object] = []

    def send(self, message: object) -> bool:
        if self.up:
            self.sent.append(message)
        return self.up


def test_fragments_of_one_writer_become_whole_lines_and_writers_never_mix():
    lines = LineAssembler()
    assert lines.feed("a", "hel") == ""
    assert lines.feed("b", "other ") == ""
    assert lines.feed("a", "lo\nwor") == "hello\n"
    assert lines.feed("b", "line\n") == "other line\n"
    assert lines.feed("a", "ld\n\nlast\n") == "world\n\nlast\n"
    assert lines.close(lambda w: True) == []


def test_closing_a_writer_returns_its_unterminated_text_as_a_line():
    lines = LineAssembler()
    lines.feed(("slot", 0), "half")
    lines.feed(("slot", 1), "kept")
    assert lines.close(lambda w: w == ("slot", 0)) == [(("slot", 0), "half\n")]
    assert lines.feed(("slot", 1), " going\n") == "kept going\n"


def test_the_printer_writes_lines_to_the_stream_they_were_written_to(capsys):
    printer = SlotOutputPrinter()
    assert printer.handle(SlotOutput(0, 0, "stdout", 1, "out "))
    assert printer.handle(SlotOutput(0, 0, "stderr", 1, "err\n"))
    assert printer.handle(SlotOutput(0, 1, "stdout", 1, "other slot\n"))
    assert printer.handle(SlotOutput(0, 0, "stdout", 1, "line\n"))
    printer.handle(SlotOutput(0, 0, "stdout", 2, "cut off"))
    printer.slot_ended(0, 0)
    assert not printer.handle(object())
    out, err = capsys.readouterr()
    assert out == "other slot\nout line\ncut off\n"
    assert err == "err\n"


def test_a_slots_log_record_is_re_emitted_with_its_subtask_if_the_driver_logs_its_level(caplog):
    printer = SlotOutputPrinter()
    record = SlotLog(0, 1, "Map (2/2)", "tidegate.test.slot", logging.ERROR, "boom", "Trace\n  x")
    with caplog.at_level(logging.WARNING, logger="tidegate.test.slot"):
        assert printer.handle(record)
        printer.handle(SlotLog(0, 1, "Map (2/2)", "tidegate.test.slot", logging.INFO, "quiet"))
    [logged] = caplog.records
    assert logged.getMessage() == "[Map (2/2)] boom"
    assert (logged.subtask, logged.slot, logged.exc_text) == ("Map (2/2)", 1, "Trace\n  x")


def test_a_forwarding_stream_sends_each_write_tagged_with_its_thread():
    control = Control()
    stream = ForwardingStream(control, 3, 1, "stdout", io.StringIO())
    print("a", 1, file=stream)  # four writes, one line
    stream.write("two\nlines and a ")
    other = threading.Thread(target=lambda: stream.write("b"))
    other.start()
    other.join(5)
    stream.flush()  # the calling thread's unterminated text
    stream.write("rest")
    stream.flush_all()  # every thread's (the slot ends)
    me, them = threading.get_ident(), other.ident
    assert control.sent == [
        SlotOutput(3, 1, "stdout", me, "a 1\n"),
        SlotOutput(3, 1, "stdout", me, "two\nlines and a "),
        SlotOutput(3, 1, "stdout", them, "b"),
        SlotOutput(3, 1, "stdout", me, "rest"),
    ]
    with pytest.raises(TypeError, match="must be str"):
        stream.write(b"bytes")


def test_without_the_driver_the_text_goes_to_the_workers_own_stream():
    fallback = io.StringIO()
    stream = ForwardingStream(Control(up=False), 0, 0, "stdout", fallback)
    print("still here", file=stream)
    assert fallback.getvalue() == "still here\n"


def test_forward_output_redirects_stdout_stderr_and_logging_only_while_the_slot_runs():
    control = Control()
    before = sys.stdout, sys.stderr, logging.getLogger().level, list(logging.getLogger().handlers)
    with forward_output(control, 2, 0, logging.INFO):
        print("to the driver")
        print("err", file=sys.stderr)
        logging.getLogger("tidegate.test.worker").info("logged %s", "here")
        logging.getLogger("tidegate.test.worker").debug("below the driver's level")
    after = sys.stdout, sys.stderr, logging.getLogger().level, list(logging.getLogger().handlers)
    assert after == before
    texts = [(m.stream, m.text) for m in control.sent if isinstance(m, SlotOutput)]
    assert texts == [("stdout", "to the driver\n"), ("stderr", "err\n")]
    [log] = [m for m in control.sent if isinstance(m, SlotLog)]
    assert (log.logger, log.level, log.message) == (
        "tidegate.test.worker",
        logging.INFO,
        "logged here",
    )
    assert log.subtask == threading.current_thread().name
