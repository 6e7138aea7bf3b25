"""Korean answers are Korean throughout (issue 30): severities, headings, evidence locations, step texts and the notes
beside changes, the engine's own notes included; names of flags, keys and commands stay as they are."""
from bot.answer.render import diagnosis_text
from core import frameworks as FW

from test_advice_vocabulary import TIMEOUT


def test_every_note_a_playbook_or_the_vocabulary_writes_has_korean(books):
    missing = [(b.path.name, st["id"], c["name"]) for b in books for st in b.playbook["steps"] for c in st["changes"]
               if c["note"] and not c["note_ko"]]
    assert missing == []
    assert [n.name for fw in FW.VOCAB.values() for n in fw.values() if n.note and not n.note_ko] == []


def test_a_korean_answer_has_korean_severity_lines_and_notes(engine):
    lag = TIMEOUT.replace("[rank1]", "[rank3]").replace("[Rank 1]", "[Rank 3]").replace("SeqNum=1205", "SeqNum=1204")
    log = ("p5-st-1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 4 cudaDev 0 busId 53000 - Init COMPLETE\n"
           "p5-st-2:2:2 [1] NCCL INFO comm 0x2 rank 3 nranks 4 cudaDev 1 busId 64000 - Init COMPLETE\n"
           + TIMEOUT.replace("[rank1]", "[rank0]").replace("[Rank 1]", "[Rank 0]") + lag)
    from core.ingest import from_bytes
    text = diagnosis_text(engine.diagnose(from_bytes(log.encode(), "x"), "ko"), "ko")
    assert "[심각]" in text and "[critical]" not in text
    assert "3번째 줄:" in text and "line 3:" not in text
    assert "로그에서 프레임워크를 알아보지 못함" in text and "framework not recognised" not in text
    assert "의심 노드와 정상 노드 사이" in text and "the suspect node" not in text
    assert "stuck on an earlier collective" not in text.split("조치:")[1]


def test_the_korean_notes_of_the_vocabulary_and_the_engine(books):
    from playbooks.engine import steps_for
    from core.models import Finding
    nan = Finding(symptom="loss_nan", rule="loss_nan.series", title="NaN", severity="error", confidence=0.9)
    notes = [c.note for s in steps_for(nan, {}, {"framework": "megatron"}, books, "ko") for c in s.changes if c.note]
    assert "설정돼 있다면 --fp16도 빼세요" in notes
    hf = FW.name_for("distributed_timeout", FW.HF, None, "ko")
    assert hf.note == "초 단위" and FW.name_for("distributed_timeout", FW.HF, None).note == "seconds"


def test_the_slack_answer_in_korean_says_its_changes_and_labels_in_korean(engine):
    import json
    from bot.slack.blocks import diagnosis_blocks
    from core.ingest import from_bytes
    from conftest import ROOT
    d = engine.diagnose(from_bytes((ROOT / "examples" / "p5-megatron-oom.log").read_bytes(), "x"), "ko")
    text = json.dumps(diagnosis_blocks(d, lang="ko")[0], ensure_ascii=False)
    assert "# 현재 4" in text and "# was 4" not in text
    assert "심각도 *심각*" in text and "severity *critical*" not in text
    assert "21번째 줄:" in text
