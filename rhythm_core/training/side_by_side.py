"""Independent torch work side by side in forked processes, each on its share of this process's threads.

A tiny student's lockstep play (small batched forwards, attention over a growing key/value cache)
does not keep two cores busy: a second torch thread shortens one play by far less than half, and two
such plays at once, one thread each, finish well before the two one after the other. So work that plays several students (the gate's two students, an evaluation
condition's players) hands each to a worker process with `threads // workers` torch threads.

The workers are forked (`rhythm_core.processes`: a spawned worker would import torch and transformers
again, seconds each). A forked worker sets its torch pool to its share before it runs anything; with one
thread a worker never enters an OpenMP parallel region, the pattern of torch's own DataLoader
workers, which is what makes forking a process that has already run threaded torch safe. Where
fork is not the platform's safe default or there are not two threads to share, the calls run here,
one after the other. Results do not depend on the thread count: the same 100 weeks played with one
and with two threads give identical records (tests/test_eval.py checks the side-by-side path).

On a CUDA machine the calls always run here, one after the other: a process that has initialized
CUDA cannot fork workers that use it ("Cannot re-initialize CUDA in forked subprocess"), the models
play on the GPU rather than on the threads being shared, and two students at once would hold two
models in its memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..processes import forked_pool, forked_workers


def plays_on_cuda() -> bool:
    """Whether torch work here runs on CUDA (a GPU is visible, or CUDA was initialized already)."""
    import torch

    return torch.cuda.is_initialized() or torch.cuda.is_available()


def run_side_by_side(fn: Callable, jobs: Sequence[tuple], *, threads: int | None = None) -> list:
    """`[fn(*args) for args in jobs]`, computed in forked workers that share `threads` torch threads
    (this process's pool by default); results in the order of `jobs`. `fn` and its arguments and
    results must pickle (a module-level function and plain values). A worker's exception is raised
    here, with its traceback in the message. On CUDA the calls run in this process."""
    import torch

    if threads is None:
        threads = torch.get_num_threads()
    workers = 1 if plays_on_cuda() else forked_workers(len(jobs), threads)  # one per torch thread
    if workers < 2:
        return [fn(*args) for args in jobs]
    with forked_pool(workers, initializer=_torch_threads, initargs=(max(1, threads // workers),)) as pool:
        futures = [pool.submit(fn, *args) for args in jobs]
        return [future.result() for future in futures]


def _torch_threads(threads: int) -> None:  # a worker's first act: its share of the threads
    import torch

    torch.set_num_threads(threads)
