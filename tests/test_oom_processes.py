"""An OOM message that lists the processes on the GPU: another process's memory is named only when it matters."""
import pytest

MSG = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
       "of 79.10 GiB of which 3.50 MiB is free. {procs} Of the allocated memory 16.90 GiB is allocated by PyTorch, and "
       "512.00 MiB is reserved by PyTorch but unallocated.")


@pytest.mark.parametrize("procs,other", [
    ("Process 41234 has 61.20 GiB memory in use. Process 51877 has 17.88 GiB memory in use.", (61.2, [41234])),
    ("Process 51877 has 17.88 GiB memory in use. Process 7 has 30.00 GiB memory in use. "
     "Process 8 has 31.00 GiB memory in use.", (61.0, [7, 8])),
    # near-misses: only this process, or another one holding little (a monitoring agent)
    ("Process 51877 has 78.90 GiB memory in use.", None),
    ("Process 51877 has 78.10 GiB memory in use. Process 900 has 812.00 MiB memory in use.", None),
])
def test_other_processes_on_the_gpu(run, procs, other):
    f = run(MSG.format(procs=procs)).findings[0]
    ids = [s.id for s in f.steps]
    if other is None:
        assert "other_processes_gib" not in f.facts and "cuda_oom.other_process" not in ids
    else:
        assert (f.facts["other_processes_gib"], f.facts["other_pids"]) == other
        assert ids[0] == "cuda_oom.other_process"
