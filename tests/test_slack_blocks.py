"""Block Kit builders are pure and stay inside Slack's limits however large the diagnosis."""
from bot.slack.blocks import MAX_BLOCKS, MAX_SECTION, diagnosis_blocks, home_view
from core.models import Change, Diagnosis, Evidence, Finding, InputInfo, Step


def _big():
    steps = [Step(id=f"s{i}", owner="ml", text="x" * 5000, cite=["oom#micro-batch"],
                  changes=[Change(kind="env", name="NCCL_DEBUG", to="INFO")] * 30) for i in range(12)]
    findings = [Finding(symptom="cuda_oom", rule="r", title="t" * 4000, severity="critical", confidence=0.9,
                        evidence=[Evidence(line=i, text="e" * 2000) for i in range(5)], steps=steps)
                for _ in range(8)]
    return Diagnosis(input=InputInfo(name="n" * 500, bytes=1, lines=1), findings=findings)


def _check(blocks):
    assert len(blocks) <= MAX_BLOCKS
    for b in blocks:
        if "text" in b and b["type"] == "section":
            assert len(b["text"]["text"]) <= MAX_SECTION
        if b["type"] == "header":
            assert len(b["text"]["text"]) <= 150
        for e in b.get("elements", []):
            if isinstance(e.get("text"), str):
                assert len(e["text"]) <= MAX_SECTION


def test_huge_diagnosis_fits_and_says_it_was_cut():
    blocks, cut = diagnosis_blocks(_big(), 7, "https://wiki.example/runbook")
    _check(blocks)
    assert cut
    assert blocks[-1]["type"] == "actions"
    assert "<https://wiki.example/runbook/oom.md#micro-batch|oom#micro-batch>" in str(blocks)


def test_healthy_diagnosis_is_short_and_not_cut():
    d = Diagnosis(input=InputInfo(name="ok.log", bytes=10, lines=3))
    blocks, cut = diagnosis_blocks(d, None)
    assert not cut and "No known failure" in blocks[0]["text"]["text"]


def test_no_finding_with_unrecognised_errors_is_not_called_healthy():
    d = Diagnosis(input=InputInfo(name="crash.log", bytes=10, lines=3), unclaimed=[
        {"template": "RuntimeError: CUDA error: an illegal memory access was encountered", "count": 8, "line": 2,
         "example": "[rank3]: RuntimeError: CUDA error: an illegal memory access ```was``` encountered"}])
    blocks, cut = diagnosis_blocks(d, None)
    _check(blocks)
    assert ":grey_question:" in blocks[0]["text"]["text"] and "healthy" not in str(blocks)
    assert "line 2 (×8)" in blocks[1]["text"]["text"] and blocks[1]["text"]["text"].count("```") == 2


def test_home_view_limits():
    rows = [{"id": i, "created_at": "2026-11-29T10:00:00", "channel": "C1", "top_symptom": "cuda_oom",
             "top_title": "x" * 5000, "vote": "up"} for i in range(30)]
    view = home_view(rows, {"cuda_oom": 30})
    _check(view["blocks"])


def test_steps_left_out_are_counted_never_dropped_silently():
    blocks, cut = diagnosis_blocks(_big(), 7)
    _check(blocks)
    assert cut and any("+6 more steps in the full diagnosis" in str(b) for b in blocks)   # 12 steps, 6 shown
