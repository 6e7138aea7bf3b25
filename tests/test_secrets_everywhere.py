"""Every kind of secret, fed through every output: CLI text and JSON, the store's database file, the LLM request
and the Slack answer. No 10-character piece of a secret may come out anywhere."""
import json

import pytest

from core.redact import mask_secrets

SECRETS = {   # the line a log might carry -> the secret value in it
    "AWS_ACCESS_KEY_ID=AKIAQ7ZX3WVUTSR2PLMN": "AKIAQ7ZX3WVUTSR2PLMN",
    "aws_secret_access_key = Zq8vP2mXr7Ty1Ua4Sb6Nc3Wd9Ke5Lf0Gh2Ji8Ko4": "Zq8vP2mXr7Ty1Ua4Sb6Nc3Wd9Ke5Lf0Gh2Ji8Ko4",
    "SLACK_BOT_TOKEN=xoxb-918273645019-564738291047-QwErTyUiOpAsDfGh": "xoxb-918273645019-564738291047-QwErTyUiOpAsDfGh",
    "remote https://ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8@github.com/o/r": "ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8",
    "HF_TOKEN=hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa98765432": "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa98765432",
    "OPENAI_API_KEY=sk-proj-Lm9Nb8Vc7Xz6Qa5Ws4Ed3Rf2Tg1": "sk-proj-Lm9Nb8Vc7Xz6Qa5Ws4Ed3Rf2Tg1",
    "Authorization: Bearer Pq7Wr8Et9Yu0Io1Pa2Sd3Fg4Hj": "Pq7Wr8Et9Yu0Io1Pa2Sd3Fg4Hj",
    "maps key AIzaSyB9x8w7v6u5t4s3r2q1p0o9n8m7l6k5j4i": "AIzaSyB9x8w7v6u5t4s3r2q1p0o9n8m7l6k5j4i",
    "id_token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ0cmFpbmVyIn0.Tm9TaWduYXR1cmVIZXJl": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ0cmFpbmVyIn0.Tm9TaWduYXR1cmVIZXJl",
    "MLFLOW_TRACKING_URI=https://svc:Vk3/9xQw72LpZ@mlflow.corp:5000": "Vk3/9xQw72LpZ",
    "WANDB_API_KEY=4f1e9a7c2b8d6e0f3a5c7e9b1d3f5a7c9e1b3d5f": "4f1e9a7c2b8d6e0f3a5c7e9b1d3f5a7c9e1b3d5f",
    "DB_PASSWORD=Rt5Yh8Uj2Ik4Ol": "Rt5Yh8Uj2Ik4Ol",
    "PGPASSWORD=Mn6Bv4Cx2Zl8Kj": "Mn6Bv4Cx2Zl8Kj",
    "MLFLOW_TRACKING_TOKEN=Gh7Jk9Lz3Xc5Vb": "Gh7Jk9Lz3Xc5Vb",
    "OAUTH_CLIENT_SECRET_VALUE=Qw3Er5Ty7Ui9Op": "Qw3Er5Ty7Ui9Op",
    "python upload.py --password Zx1Cv3Bn5Mq7Wp": "Zx1Cv3Bn5Mq7Wp",
    "account arn:aws:iam::482193657012:role/Trainer": "482193657012",
}
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAu7T3kQx9LmZ2pW8rYc4N\nVb6Hs1Jd9Kf3Lg5Mh7Ni2Oj4Pk6Ql8Rm0S\n"
       "-----END RSA PRIVATE KEY-----")
OOM = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.15 GiB of which 1.00 GiB is free. {line}")


def _log() -> str:
    out = []
    for line in SECRETS:
        out += [line, f"RuntimeError: checkpoint upload failed ({line})", OOM.format(line=line)]
    return "\n".join(out + [PEM, "RuntimeError: could not read key\n" + PEM]) + "\n"


def _pieces(secret: str) -> list[str]:
    return [secret[i:i + 10] for i in range(max(1, len(secret) - 9))]


def _leaks(output: str) -> list[str]:
    out = [s for s in SECRETS.values() if any(p in output for p in _pieces(s))]
    for body in PEM.splitlines()[1:-1]:
        out += [body] if any(p in output for p in _pieces(body)) else []
    return out


def test_the_masking_rules_catch_every_kind():
    for line, secret in SECRETS.items():
        assert not _leaks(mask_secrets(line)), line
    assert not _leaks(mask_secrets(PEM))


def test_no_secret_reaches_text_json_or_the_store(run, tmp_path):
    from bot.render import diagnosis_text
    from bot.store import Store
    d = run(_log())
    assert d.findings and d.findings[0].symptom == "cuda_oom" and d.unclaimed
    text, doc = diagnosis_text(d), json.dumps(d.to_json_dict())
    store = Store(tmp_path / "t.db")
    store.record(d, _log().encode(), job_key="HF_TOKEN=hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa98765432")
    raw = (tmp_path / "t.db").read_bytes().decode("latin-1")
    wal = tmp_path / "t.db-wal"
    raw += wal.read_bytes().decode("latin-1") if wal.exists() else ""
    assert _leaks(text) == [] and _leaks(doc) == [] and _leaks(raw) == []


def test_no_secret_reaches_the_llm(run, tmp_path):
    from bot.llm import LLMConfig, Phraser
    from bot.store import Store
    from knowledge.runbook import load as load_runbook
    from testkit.fakellm import FakeLLM
    srv = FakeLLM("echo")
    try:
        store = Store(tmp_path / "s.db")
        d = run(_log())
        Phraser(LLMConfig("openai", "gpt-test", srv.url, None, 20.0), load_runbook(), store).phrase(d, "en",
                                                                                                   store.record(d))
        assert srv.raw and _leaks(b"".join(srv.raw).decode()) == []
        assert _leaks(json.dumps(list(store.db["llm_log"].rows))) == []
    finally:
        srv.stop()


@pytest.mark.parametrize("what", ["log", "question"])
def test_no_secret_reaches_slack(slack_bot, what):
    h = slack_bot()
    text = _log() if what == "log" else "why did the upload fail? " + " ".join(SECRETS)
    h.slash(text)
    resp = h.fake.wait(lambda: h.fake.responses)[0]
    assert _leaks(json.dumps(resp)) == []
