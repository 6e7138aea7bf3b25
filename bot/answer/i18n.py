"""Words of the deterministic renderer in each supported language (step texts come from the playbooks)."""
from __future__ import annotations

from core import symptoms

LANGS = ("en", "ko")

TEXT = {
    "en": {"root": "ROOT CAUSE", "also": "ALSO", "evidence": "evidence", "facts": "facts", "steps": "steps",
           "runbook": "runbook", "consequence": "consequence of", "healthy":
           "No known failure found. The log looks healthy for the symptoms Train Triage knows.",
           "healthy_parts": "No known failure found in the parts read: part of the input was not read (see the note "
                            "above), so this is not a verdict on the whole log.",
           "unknown": "No known failure found, but these error or warning lines are not ones Train Triage recognises "
                      "— read them first:",
           "versions": "versions", "lines": "lines", "truncated": "TRUNCATED", "ml": "ML", "infra": "Infra",
           "phrased": "phrased by {model}, checked against the diagnosis",
           "more": "if those are not enough", "cleanup": "also clean up and check", "was": "was", "remove": "remove",
           "critical": "critical", "error": "error", "warning": "warning", "line_n": "line {n}",
           "severity": "severity", "confidence": "confidence"},
    "ko": {"root": "근본 원인", "also": "함께 발견", "evidence": "증거", "facts": "추출한 사실", "steps": "조치",
           "runbook": "런북", "consequence": "다음의 결과:", "healthy":
           "알려진 장애를 찾지 못했습니다. Train Triage가 아는 증상 기준으로는 정상 로그입니다.",
           "healthy_parts": "읽은 부분에서는 알려진 장애를 찾지 못했습니다. 입력의 일부를 읽지 않았으므로(위 메모 참고) 로그 전체에 대한 판정은 아닙니다.",
           "unknown": "알려진 장애를 찾지 못했지만, Train Triage가 알아보지 못한 오류/경고 줄이 있습니다. 먼저 확인하세요:",
           "versions": "버전", "lines": "줄", "truncated": "일부만 읽음", "ml": "ML", "infra": "인프라",
           "phrased": "{model}이(가) 다듬은 문장이며, 진단 내용과 대조해 검증했습니다",
           "more": "그래도 부족하면", "cleanup": "함께 정리·점검할 것", "was": "현재", "remove": "삭제",
           "critical": "심각", "error": "오류", "warning": "경고", "line_n": "{n}번째 줄",
           "severity": "심각도", "confidence": "신뢰도"},
}

def t(lang: str, key: str) -> str:
    return TEXT.get(lang, TEXT["en"]).get(key, TEXT["en"][key])


def finding_title(lang: str, f) -> str:
    """The finding's title in the reader's language (Korean built from its facts)."""
    if lang == "ko":
        from bot.answer.titles_ko import title
        return title(f)
    return f.title


def symptom_name(lang: str, symptom: str) -> str:
    return symptoms.name(symptom, lang)
