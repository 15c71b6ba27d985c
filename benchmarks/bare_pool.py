"""The floor for a session call: N ``torch.multiprocessing`` fork workers that joined one gloo
group and run what they are sent, with nothing else (no supervision, no output capture, no
interrupts, no failure handling, no panel).

The kernel cloudpickles ``(function, args)`` once and writes it to each worker's pipe; each worker
runs it and sends back its pickled value on a pipe of its own; the kernel waits for every answer.

    pool = BarePool(2, port)
    pool.run(fn)          # [value of rank 0, value of rank 1]
    pool.close()
"""

from __future__ import annotations

import os
import pickle
from multiprocessing.connection import wait

import cloudpickle
import torch.multiprocessing as mp


def _serve(rank: int, n: int, port: int, commands, answers) -> None:
    import torch.distributed as dist

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo")
    answers.send_bytes(b"ready")
    while True:
        try:
            data = commands.recv_bytes()
        except EOFError:
            break
        if not data:  # close(): workers forked later hold this pipe too, so no EOF comes
            break
        function, args = cloudpickle.loads(data)
        answers.send_bytes(pickle.dumps(function(*args), protocol=pickle.HIGHEST_PROTOCOL))
    dist.destroy_process_group()


class BarePool:
    def __init__(self, n: int, port: int) -> None:
        ctx = mp.get_context("fork")
        self.commands, self.answers, self.processes = [], [], []
        for rank in range(n):
            command_r, command_w = ctx.Pipe(duplex=False)
            answer_r, answer_w = ctx.Pipe(duplex=False)
            process = ctx.Process(target=_serve, args=(rank, n, port, command_r, answer_w))
            process.start()
            command_r.close()
            answer_w.close()
            self.commands.append(command_w)
            self.answers.append(answer_r)
            self.processes.append(process)
        for answer in self.answers:
            assert answer.recv_bytes() == b"ready"

    def run(self, function, *args) -> list:
        data = cloudpickle.dumps((function, args))
        for command in self.commands:
            command.send_bytes(data)
        values: dict[int, object] = {}
        pending = dict(enumerate(self.answers))
        while pending:
            for answer in wait(list(pending.values())):
                rank = self.answers.index(answer)
                values[rank] = pickle.loads(answer.recv_bytes())
                del pending[rank]
        return [values[rank] for rank in range(len(self.answers))]

    def close(self) -> None:
        for command in self.commands:
            command.send_bytes(b"")
            command.close()
        for process in self.processes:
            process.join(10)
            if process.exitcode is None:
                process.kill()
                process.join()
        for answer in self.answers:
            answer.close()
