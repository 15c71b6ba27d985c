"""Reading faulthandler's stack dumps: trimming the kernel's frames, finding where a rank was."""

from __future__ import annotations

import faulthandler
import tempfile
import threading

from notebook_launcher.launch.supervision.stacks import locate, trim_kernel_frames, where_ranks_were

DUMP = """\
Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/work/app/logger.py", line 9 in flush_loop

Current thread 0x00007f0000000002 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 5356 in barrier
  File "/work/nl/notebook_launcher/state/partial.py", line 188 in wait_for_everyone
  File "/tmp/ipykernel_1/123.py", line 7 in train
  File "/work/nl/notebook_launcher/launch/worker.py", line 171 in _call
  File "/work/nl/notebook_launcher/launch/worker.py", line 217 in run_worker
  File "/venv/lib/python3.11/multiprocessing/process.py", line 108 in run
  File "/venv/lib/python3.11/site-packages/ipykernel/kernelbase.py", line 400 in dispatch_shell
"""


def test_trim_drops_the_kernel_frames_below_the_worker_bootstrap_only():
    kept = trim_kernel_frames(DUMP.splitlines())
    text = "\n".join(kept)
    assert "run_worker" in text
    assert "multiprocessing/process.py" not in text
    assert "site-packages/ipykernel" not in text
    assert "flush_loop" in text  # other threads are kept whole
    assert len(kept) == len(DUMP.splitlines()) - 2


def test_locate_finds_the_user_frame_of_the_main_thread_and_the_collective():
    place = locate(DUMP)
    assert place is not None
    assert (place.function, place.file, place.line) == ("train", "/tmp/ipykernel_1/123.py", 7)
    assert place.in_collective
    assert "waiting for the other ranks" in place.describe()


def test_where_ranks_were_names_the_rank_that_held_the_others_up():
    busy = DUMP.replace(
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
        "line 5356 in barrier\n",
        "",
    )
    text = where_ranks_were({0: DUMP, 1: busy})
    assert "rank 0 was waiting for the other ranks" in text
    assert "rank 1 was in wait_for_everyone" not in text
    assert "rank 1 was in train (/tmp/ipykernel_1/123.py:7)" in text
    assert "most likely held up by rank 1" in text


def test_missing_stack_is_reported_not_guessed():
    assert "unknown place" in where_ranks_were({0: ""})
    assert locate("garbage") is None


def test_real_faulthandler_output_parses():
    def run_worker():  # named like the bootstrap frame the parser anchors on
        with tempfile.TemporaryFile("w+") as out:
            faulthandler.dump_traceback(file=out, all_threads=True)
            out.seek(0)
            return out.read()

    dump = run_worker()
    place = locate(dump)
    assert place is not None and not place.in_collective
    assert threading.main_thread().is_alive()


def test_a_rank_stuck_joining_the_job_is_not_called_a_waiting_rank():
    joining = DUMP.replace(
        'distributed_c10d.py", line 5356 in barrier',
        'rendezvous.py", line 190 in _create_c10d_store',
    )
    place = locate(joining)
    assert place is not None and place.in_rendezvous
    assert "joining the job" in place.describe()
    assert "held up" not in where_ranks_were({0: joining, 1: DUMP})
