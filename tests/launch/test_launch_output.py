"""Worker output as the caller sees it: every line once, labelled, on the right stream."""

from __future__ import annotations

import ctypes
import os
import re
import sys
import time

import pytest
from helpers.ranklabels import label_ranks, text_of

from notebook_launcher import PartialState, WorkersFailedError
from notebook_launcher import notebook_launcher as launch

LINES_PER_RANK = 40


def lines_of(text: str) -> list[str]:
    return text.splitlines()


def many_lines():
    rank = int(os.environ["RANK"])
    for i in range(LINES_PER_RANK):
        print(f"line {i} of rank {rank}")
    return rank


def test_every_line_arrives_once_labelled_and_whole(capfd):
    assert launch(many_lines, num_processes=2).values == [0, 1]

    out = lines_of(capfd.readouterr().out)
    worker_lines = [line for line in out if "line " in line]
    for line in worker_lines:  # nothing glued together, nothing unlabelled
        assert re.fullmatch(r"\[rank(\d)\] line \d+ of rank \1", line), line
    expected = [f"[rank{r}] line {i} of rank {r}" for r in (0, 1) for i in range(LINES_PER_RANK)]
    assert sorted(worker_lines) == sorted(expected)
    for rank in (0, 1):  # each rank's lines keep their order
        own = [line for line in worker_lines if line.startswith(f"[rank{rank}]")]
        assert own == [f"[rank{rank}] line {i} of rank {rank}" for i in range(LINES_PER_RANK)]


def split_writes():
    rank = os.environ["RANK"]
    os.write(1, f"first half of rank {rank}, ".encode())
    time.sleep(0.05)
    os.write(1, f"second half of rank {rank}\nnext line of rank {rank}\n".encode())


def test_a_line_written_in_pieces_is_shown_as_one_line(capfd):
    launch(split_writes, num_processes=2)

    out = lines_of(capfd.readouterr().out)
    for rank in (0, 1):
        assert out.count(f"[rank{rank}] first half of rank {rank}, second half of rank {rank}") == 1
        assert out.count(f"[rank{rank}] next line of rank {rank}") == 1


def to_both_streams():
    rank = os.environ["RANK"]
    print(f"to stdout from {rank}")
    print(f"to stderr from {rank}", file=sys.stderr)


def test_stderr_lines_go_to_stderr(capfd):
    launch(to_both_streams, num_processes=2)

    captured = capfd.readouterr()
    out, err = lines_of(captured.out), lines_of(captured.err)
    for rank in (0, 1):
        assert f"[rank{rank}] to stdout from {rank}" in out
        assert f"[rank{rank}] to stderr from {rank}" in err
        assert f"[rank{rank}] to stderr from {rank}" not in out
        assert f"[rank{rank}] to stdout from {rank}" not in err


def c_level_output():
    rank = int(os.environ["RANK"])
    os.write(1, f"os.write from rank {rank}\n".encode())
    os.write(2, f"os.write to fd 2 from rank {rank}\n".encode())
    libc = ctypes.CDLL(None)
    libc.printf(b"printf from rank %d\n", ctypes.c_int(rank))
    libc.fflush(None)


def test_c_level_output_is_captured(capfd):
    launch(c_level_output, num_processes=2)

    captured = capfd.readouterr()
    out, err = lines_of(captured.out), lines_of(captured.err)
    for rank in (0, 1):
        assert out.count(f"[rank{rank}] os.write from rank {rank}") == 1
        assert out.count(f"[rank{rank}] printf from rank {rank}") == 1
        assert err.count(f"[rank{rank}] os.write to fd 2 from rank {rank}") == 1


def unterminated_last_line_then_crash():
    if os.environ["RANK"] == "1":
        sys.stdout.write("last words without a newline")
        sys.stdout.flush()
        os._exit(7)
    time.sleep(30)


def test_unterminated_last_line_of_a_crashing_rank_arrives(capfd):
    with pytest.raises(WorkersFailedError) as info:
        launch(unterminated_last_line_then_crash, num_processes=2)

    out = lines_of(capfd.readouterr().out)
    assert out.count("[rank1] last words without a newline") == 1
    assert info.value.failure.last_lines[-1] == "[rank1] last words without a newline"
    assert "[rank1] last words without a newline" in str(info.value)


def test_output_main_shows_only_rank_0(capfd):
    launch(to_both_streams, num_processes=2, output="main")

    captured = capfd.readouterr()
    assert "[rank0] to stdout from 0" in lines_of(captured.out)
    assert "[rank0] to stderr from 0" in lines_of(captured.err)
    assert "rank1" not in captured.out + captured.err
    assert "from 1" not in captured.out + captured.err


def test_output_none_shows_nothing(capfd):
    result = launch(to_both_streams, num_processes=2, output="none")

    captured = capfd.readouterr()
    assert result.returned_nothing
    assert "to stdout" not in captured.out + captured.err
    assert "to stderr" not in captured.out + captured.err


def print_then_fail():
    print(f"progress of rank {os.environ['RANK']}", flush=True)
    if os.environ["RANK"] == "1":
        raise RuntimeError("hidden output, visible failure")
    time.sleep(30)


def test_output_none_still_reports_the_failed_ranks_last_lines(capfd):
    with pytest.raises(RuntimeError, match="hidden output") as info:
        launch(print_then_fail, num_processes=2, output="none")

    captured = capfd.readouterr()
    assert "progress of rank" not in captured.out + captured.err
    assert info.value.launch_failure.last_lines == ("[rank1] progress of rank 1",)


def test_custom_log_line_prefix_template(capfd):
    launch(
        to_both_streams,
        num_processes=2,
        log_line_prefix_template="<node {node_rank} local {local_rank} global {rank}> ",
    )

    captured = capfd.readouterr()
    out = lines_of(captured.out)
    assert "<node 0 local 0 global 0> to stdout from 0" in out
    assert "<node 0 local 1 global 1> to stdout from 1" in out
    assert "<node 0 local 1 global 1> to stderr from 1" in lines_of(captured.err)
    assert "[rank" not in captured.out + captured.err


def ranks_that_drift_apart():
    state = PartialState()
    state.wait_for_everyone()
    time.sleep(0.6 * state.process_index)  # each rank 0.6 s behind the one before
    print("epoch 1 done", flush=True)
    print(f"loss of rank {state.process_index}", flush=True)


def test_an_alike_line_of_ranks_that_drift_apart_is_shown_in_two_groups_at_most(capfd):
    result = launch(ranks_that_drift_apart, num_processes=3)

    out = lines_of(capfd.readouterr().out)
    groups = [line for line in out if text_of(line) == "epoch 1 done"]
    # Rank 0 within the grouping window, ranks 1 and 2 (lagging) together, not one by one.
    assert sorted(rank for line in groups for rank in label_ranks(line)) == [0, 1, 2], out
    assert len(groups) <= 2, out
    for rank in range(3):
        assert result.output(rank).splitlines() == ["epoch 1 done", f"loss of rank {rank}"]
        own = [text_of(line) for line in out if rank in label_ranks(line)]
        assert own == ["epoch 1 done", f"loss of rank {rank}"], out
