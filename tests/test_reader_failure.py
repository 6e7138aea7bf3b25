"""A bug in one reader (an exception on some odd line) must not cost the whole diagnosis: that reader is switched
off for the input, the others still answer, and the answer says which reader was skipped."""
from parsers.convergence import LossParser
from parsers.gpu import XidParser

OOM_AND_LOSS = (
    "step=10 loss=2.31\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.02 GiB is free.\n"
)


def test_a_reader_that_raises_while_reading_is_skipped_and_named(run, monkeypatch):
    def broken(self, hit):
        raise ValueError("could not convert string to float: '0.665.'")
    monkeypatch.setattr(LossParser, "feed", broken)
    d = run(OOM_AND_LOSS)
    assert [f.symptom for f in d.findings] == ["cuda_oom"]
    assert any("loss reader failed" in n for n in d.input.notes)


def test_a_reader_that_raises_when_asked_for_findings_is_skipped(run, monkeypatch):
    def broken(self, ctx):
        raise KeyError("xids")
    monkeypatch.setattr(XidParser, "finish", broken)
    d = run(OOM_AND_LOSS + "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n")
    assert [f.symptom for f in d.findings] == ["cuda_oom"]
    assert any("gpu_xid reader failed" in n for n in d.input.notes)


def test_a_healthy_run_has_no_such_note(run):
    assert not any("reader failed" in n for n in run(OOM_AND_LOSS).input.notes)
