"""Alike lines of several ranks shown once, each rank's lines in order, stderr records tagged."""

from __future__ import annotations

import io

import pytest
from helpers.ranklabels import label_ranks, text_of

from notebook_launcher.launch.supervision.grouping import LineGroups, rank_label
from notebook_launcher.launch.supervision.output import OutputSink, without_timings
from notebook_launcher.protocol.channel import CONTINUED_TAG, STDERR_TAG, LineSplitter
from notebook_launcher.protocol.events import OutputLine
from notebook_launcher.protocol.failure import WorkerFailure


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("ranks", "label"),
    [
        ([3], "[rank3]"),
        ([0, 1, 2, 3, 4, 5, 6, 7], "[rank0-7]"),
        ([7, 0, 4, 2, 5, 6], "[ranks 0,2,4-7]"),
        ([1, 3], "[ranks 1,3]"),
        ([0, 1, 5], "[ranks 0-1,5]"),
    ],
)
def test_rank_labels(ranks, label):
    assert rank_label(ranks) == label


def sink_for(expected: int, policy: str = "all"):
    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    sink = OutputSink(
        policy,
        lambda r: f"[rank{r}] ",
        stdout=out,
        stderr=err,
        ranks=range(expected),
        clock=clock,
    )
    return sink, out, err, clock


def test_a_line_every_rank_prints_is_shown_once_at_once():
    sink, out, _, clock = sink_for(8)
    for rank in (3, 1, 0, 2, 7, 6, 5, 4):
        sink.write(OutputLine(rank, "stdout", "epoch 1 done"))
        sink.flush()
        if rank != 4:
            assert out.getvalue() == ""  # waits for the ranks that have not printed it yet
    assert out.getvalue() == "[rank0-7] epoch 1 done\n"
    for rank in range(8):
        assert sink.output(rank) == ["epoch 1 done"]


def test_lines_that_differ_are_shown_per_rank_and_a_late_rank_on_its_own():
    sink, out, _, clock = sink_for(4)
    for rank in range(4):
        sink.write(OutputLine(rank, "stdout", f"loss {0.5 + rank / 10}"))
    for rank in (0, 2, 3):
        sink.write(OutputLine(rank, "stdout", "saved"))
    sink.flush()  # only rank 1's line might still be printed by another rank
    assert len(out.getvalue().splitlines()) == 3
    clock.now = 0.6  # past the window: rank 1's "saved" did not come in time
    sink.flush()
    sink.write(OutputLine(1, "stdout", "saved"))
    sink.flush(final=True)
    assert out.getvalue().splitlines() == [
        "[rank0] loss 0.5",
        "[rank2] loss 0.7",
        "[rank3] loss 0.8",
        "[rank1] loss 0.6",
        "[ranks 0,2-3] saved",
        "[rank1] saved",
    ]


def test_each_rank_keeps_its_order_when_ranks_print_alike_lines_in_another_order():
    sink, out, _, clock = sink_for(2)
    for rank, text in ((0, "a"), (0, "b"), (1, "b"), (1, "a")):
        sink.write(OutputLine(rank, "stdout", text))
    sink.flush(final=True)
    lines = out.getvalue().splitlines()
    for rank, order in ((0, ["a", "b"]), (1, ["b", "a"])):
        own = [line.split("] ")[1] for line in lines if str(rank) in line.split("]")[0]]
        assert own == order, lines


def test_a_line_repeated_by_every_rank_is_grouped_once_per_repetition():
    sink, out, _, clock = sink_for(2)
    for _ in range(3):
        for rank in (0, 1):
            sink.write(OutputLine(rank, "stdout", "tick"))
    sink.flush()
    assert out.getvalue().splitlines() == ["[rank0-1] tick"] * 3


def test_raw_shows_every_line_of_every_rank_as_it_comes():
    sink, out, _, clock = sink_for(2, policy="raw")
    for rank in (0, 1):
        sink.write(OutputLine(rank, "stdout", "same"))
    sink.flush()
    assert out.getvalue().splitlines() == ["[rank0] same", "[rank1] same"]


def test_a_custom_prefix_is_kept_and_not_grouped():
    out = io.StringIO()
    sink = OutputSink("all", lambda r: f"<{r}> ", stdout=out, stderr=out, ranks=range(2))
    for rank in (0, 1):
        sink.write(OutputLine(rank, "stdout", "same"))
    sink.flush()
    assert out.getvalue().splitlines() == ["<0> same", "<1> same"]


def test_a_notice_comes_after_the_lines_held():
    sink, out, err, clock = sink_for(2)
    sink.write(OutputLine(0, "stdout", "first"))
    sink.notice("notebook_launcher: restarting")
    assert out.getvalue().splitlines() == ["[rank0] first"]
    assert err.getvalue().splitlines() == ["notebook_launcher: restarting"]


def test_a_new_call_keeps_only_its_own_lines_for_reports():
    sink, out, _, clock = sink_for(1)
    sink.write(OutputLine(0, "stdout", "from the first call"))
    sink.begin_call()
    sink.write(OutputLine(0, "stdout", "from the second call"))
    assert sink.tail(0) == ("[rank0] from the second call",)
    assert sink.output(0) == ["from the second call"]
    assert out.getvalue() == "[rank0] from the first call\n"  # held lines left first


def test_the_tagged_pipe_gives_each_line_its_stream_in_the_order_written():
    splitter = LineSplitter(2, "stdout")
    data = (
        f"out 1\n{STDERR_TAG}err 1\nout 2\n{STDERR_TAG}{CONTINUED_TAG}  0%|\r 50%|\n"
        f"{STDERR_TAG}\r100%|\n{CONTINUED_TAG}half \nline\n"
    ).encode()
    lines = splitter.feed(data[:13]) + splitter.feed(data[13:]) + splitter.close()
    assert [(line.stream, line.text) for line in lines] == [
        ("stdout", "out 1"),
        ("stderr", "err 1"),
        ("stdout", "out 2"),
        ("stderr", "100%|"),
        ("stdout", "half line"),
    ]
    assert {line.rank for line in lines} == {2}


def test_a_piece_left_unfinished_is_shown_when_the_pipe_closes():
    splitter = LineSplitter(0, "stdout")
    assert splitter.feed(f"{STDERR_TAG}{CONTINUED_TAG}last words\n".encode()) == []
    assert [(x.stream, x.text) for x in splitter.close()] == [("stderr", "last words")]


def test_line_groups_wait_no_longer_than_the_window():
    groups = LineGroups(range(3), window=0.25)
    groups.add(0, "stdout", "x", now=0.0)
    assert groups.take(now=0.2) == []
    assert groups.take(now=0.25) == [("stdout", "[rank0] x")]


def test_when_only_rank_0_prints_its_lines_wait_a_while_then_leave_at_once():
    groups = LineGroups(range(8), window=0.25, patience=1.0)
    groups.add(0, "stdout", "first", now=0.0)
    assert groups.take(now=0.1) == []  # the other ranks may print it too
    assert groups.take(now=0.3) == [("stdout", "[rank0] first")]
    groups.add(0, "stdout", "second", now=1.0)
    assert groups.take(now=1.0) == [("stdout", "[rank0] second")]


def test_a_line_no_other_rank_can_join_any_more_leaves_at_once():
    groups = LineGroups(range(2), window=10.0)
    groups.add(0, "stdout", "loss 0.5", now=0.0)
    groups.add(1, "stdout", "loss 0.6", now=0.0)
    assert groups.take(now=0.0) == []  # either rank may still print the other's line
    groups.add(0, "stdout", "next", now=0.0)
    # rank 0 printed on: rank 1 can no longer join its loss line without reordering its own
    assert groups.take(now=0.0) == [("stdout", "[rank0] loss 0.5")]
    groups.add(1, "stdout", "next", now=0.0)
    assert groups.take(now=0.0) == [("stdout", "[rank1] loss 0.6"), ("stdout", "[rank0-1] next")]


@pytest.mark.parametrize("traceback", ["", "  \n", "Traceback (most recent call last):\n"])
def test_a_report_never_prints_a_heading_without_lines_under_it(traceback):
    failure = WorkerFailure(1, 1, 42, 1, "builtins.ValueError", "boom", traceback)
    report = failure.report(())
    assert "Traceback of rank 1:" not in report, report
    assert report.splitlines()[0].endswith("ValueError: boom")


def test_a_stdout_line_cut_by_a_stderr_record_is_joined_again():
    splitter = LineSplitter(0, "stdout")
    lines = splitter.feed(f"half of a line{STDERR_TAG}a warning\n and its end\n".encode())
    assert [(x.stream, x.text) for x in lines] == [
        ("stderr", "a warning"),
        ("stdout", "half of a line and its end"),
    ]


def test_the_ranks_alike_tqdm_bars_are_shown_once_without_their_timings():
    sink, _, err, _ = sink_for(4)
    for rank in range(4):
        bar = f"epoch 1: 100%|██████████| 30/30 [00:0{rank}<00:00, {29.8 + rank}it/s]"
        sink.write(OutputLine(rank, "stderr", bar))
        sink.write(OutputLine(rank, "stderr", f"train: {30 + rank}it [00:01, 29.{rank}it/s]"))
    sink.flush(final=True)

    assert err.getvalue().splitlines() == [
        "[rank0-3] epoch 1: 100%|██████████| 30/30",
        *(f"[rank{rank}] train: {30 + rank}it" for rank in range(4)),
    ]
    # Each rank's own output keeps the whole line.
    assert sink.output(2)[0] == "epoch 1: 100%|██████████| 30/30 [00:02<00:00, 31.8it/s]"
    assert without_timings("done [00:01<00:00] and more") == "done [00:01<00:00] and more"
    assert without_timings("a list [1, 2]") == "a list [1, 2]"


def test_the_ranks_alike_rich_bars_are_shown_once_without_their_times_and_speeds():
    """As a rich.progress.Progress writes its tasks on stdout when it stops (no terminal)."""
    sink, out, _, _ = sink_for(4)
    bar = "━" * 33
    for rank in range(4):
        lines = [
            f"train {bar} 100% 15/15 0:00:0{rank} 0:00:0{rank + 1} 00:0{rank}",
            f"  download {bar[:20]} 100% 1.5/1.5 MB {rank + 1}.4 MB/s {rank}1425.49466 it/s",
            f"stream {bar} {rank + 3}1.2×10³ it/s -:--:--",
            f"eval {bar[:5]}╸{bar[:5]} 50% 1 day, {rank}:03:04 --:-- {rank}99 bytes/s ?",
        ]
        for text in lines:
            sink.write(OutputLine(rank, "stdout", text))
    sink.write(OutputLine(0, "stdout", "12:00:03 ━ a line of rank 0"))
    sink.flush(final=True)

    assert out.getvalue().splitlines() == [
        f"[rank0-3] train {bar} 100% 15/15",
        f"[rank0-3]   download {bar[:20]} 100% 1.5/1.5 MB",
        f"[rank0-3] stream {bar}",
        f"[rank0-3] eval {bar[:5]}╸{bar[:5]} 50% ?",
        "[rank0] 12:00:03 ━ a line of rank 0",  # not a bar's: as printed
    ]
    assert sink.output(2)[0] == f"train {bar} 100% 15/15 0:00:02 0:00:03 00:02"


def drifting(groups, prints, step=0.01):
    """Feed ``prints`` ((time, rank, text), any order) to ``groups``, taking the lines ready
    every ``step`` seconds as the worker group does; the lines shown, each with when it left."""
    shown: list[tuple[float, str]] = []
    pending = sorted(prints)
    end = pending[-1][0] + 10.0
    now, index = 0.0, 0
    while now <= end:
        while index < len(pending) and pending[index][0] <= now:
            at, rank, text = pending[index]
            groups.add(rank, "stdout", text, at)
            index += 1
        shown += [(now, text) for _, text in groups.take(now)]
        now = round(now + step, 6)
    assert not len(groups), "a line waited more than 10 s"
    return shown


def each_rank_saw(shown, ranks):
    """Every rank's lines in the order shown, from the labels."""
    seen: dict[int, list[str]] = {rank: [] for rank in ranks}
    for _, line in shown:
        for rank in label_ranks(line):
            seen[rank].append(text_of(line))
    return seen


def test_alike_lines_of_ranks_that_drift_apart_come_out_in_few_groups():
    """64 ranks print 5 lines alike, rank r 50 ms after rank r - 1: 3.15 s from first to last."""
    groups = LineGroups(range(64), window=0.3, patience=2.0, lag=3.0)
    prints = [(i * 1.0 + r * 0.05, r, f"epoch {i}") for r in range(64) for i in range(5)]
    shown = drifting(groups, prints)

    assert each_rank_saw(shown, range(64)) == {
        r: [f"epoch {i}" for i in range(5)] for r in range(64)
    }
    for i in range(5):
        copies = [(at, line) for at, line in shown if text_of(line) == f"epoch {i}"]
        assert len(copies) <= 2, copies  # before: one group per 0.3 s, a dozen
        # The ranks ahead are not held back by the ranks that lag behind them.
        assert copies[0][0] <= i * 1.0 + 0.3 + 0.01
        assert 0 in label_ranks(copies[0][1])
    for at, line in shown:  # and nobody waits more than the lag allowed
        printed = max(i * 1.0 + r * 0.05 for r in label_ranks(line) for i in [int(line[-1])])
        assert at - printed <= 3.0 + 0.01, (at, line)


def test_a_line_repeated_by_ranks_that_drift_apart_is_grouped_per_repetition():
    groups = LineGroups(range(16), window=0.3, patience=2.0, lag=3.0)
    prints = [(i * 0.5 + r * 0.1, r, "tick") for r in range(16) for i in range(6)]
    shown = drifting(groups, prints)

    assert each_rank_saw(shown, range(16)) == {r: ["tick"] * 6 for r in range(16)}
    assert len(shown) <= 6 * 2, shown  # before: 29 lines
    assert shown[:2] == [(0.3, "[rank0-2] tick"), (0.8, "[rank0-2] tick")]  # the ranks ahead


def test_a_lagging_ranks_own_lines_are_shown_in_its_order_and_the_others_at_once():
    groups = LineGroups(range(4), window=0.3, patience=0.5, lag=3.0)
    prints = [(0.0, r, "epoch 1") for r in (0, 1, 3)] + [
        (0.05, r, f"loss of {r}") for r in (0, 1, 3)
    ]
    prints += [(1.0, 2, "epoch 1"), (1.0, 2, "loss of 2"), (1.0, 3, "epoch 2")]
    shown = drifting(groups, prints)

    assert shown == [
        (0.3, "[ranks 0-1,3] epoch 1"),
        (0.35, "[rank0] loss of 0"),
        (0.35, "[rank1] loss of 1"),
        (0.35, "[rank3] loss of 3"),
        (1.0, "[rank2] epoch 1"),  # every rank printed it now: it leaves at once
        (1.3, "[rank2] loss of 2"),
        (1.3, "[rank3] epoch 2"),
    ]


def test_a_late_line_waits_no_longer_than_the_lag_for_ranks_that_may_never_print_it():
    groups = LineGroups(range(3), window=0.3, patience=0.0, lag=2.0)
    prints = [(0.0, 0, "saved"), (0.0, 1, "step"), (0.0, 2, "step"), (1.0, 1, "saved")]
    prints += [(1.1, 1, "next of 1")]
    shown = drifting(groups, prints)

    # Rank 1 lagged 1 s behind rank 0: rank 2 may print it too, for twice that, within the lag.
    assert shown[-2:] == [(3.0, "[rank1] saved"), (3.0, "[rank1] next of 1")]
    assert shown[0] == (0.3, "[rank0] saved")
