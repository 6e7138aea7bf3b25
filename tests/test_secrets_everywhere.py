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
    # issue 31: kinds that went through unmasked, and the services people log in to from a training job
    "REDIS_URL=redis://:Pw7Kq2Lm9Xz4Rt@cache.internal:6379/0": "Pw7Kq2Lm9Xz4Rt",
    "curl -H 'Authorization: Basic dXNlcjpwdw==' https://registry": "dXNlcjpwdw==",
    "PGPASSWORD='Kx8;Vb2,Qm7Zr4' psql -h db": "Kx8;Vb2,Qm7Zr4",
    "DB_PASSWORD=Hy6;Tg5,Rf4Ed3 ./run.sh": "Hy6;Tg5,Rf4Ed3",
    "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=acct;"
    "AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==;EndpointSuffix=core.windows.net": "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==",
    "GET https://acct.blob.core.windows.net/c/ckpt.pt?sv=2022-11-02&sr=b&sig=Qw9Er8Ty7Ui6Op5As4Df3Gh%3D&se=2026":
        "Qw9Er8Ty7Ui6Op5As4Df3Gh%3D",
    "ngc config set --key nvapi-Tz8Yx7Wv6Ut5Sr4Qp3On2Ml1Kj0Ih9Gf8Ed7Cb6": "nvapi-Tz8Yx7Wv6Ut5Sr4Qp3On2Ml1Kj0Ih9Gf8Ed7Cb6",
    "slack refresh xoxe-1-My0xLTk4NzY1NDMyMTAxMi0xMjM0NTY3ODkw": "xoxe-1-My0xLTk4NzY1NDMyMTAxMi0xMjM0NTY3ODkw",
    "databricks auth with dapi5f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c": "dapi5f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c",
    '"private_key_id": "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432",': "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432",
    "+ wandb login 7c2b8d6e0f3a5c7e9b1d3f5a7c9e1b3d5f4f1e9a": "7c2b8d6e0f3a5c7e9b1d3f5a7c9e1b3d5f4f1e9a",
    "\"wandb login --api-key 0123456789abcdef0123\"' returned non-zero": "0123456789abcdef0123",
    "gitlab clone glpat-Zx9Cv8Bn7Mq6Wp5Lk4Jh3G": "glpat-Zx9Cv8Bn7Mq6Wp5Lk4Jh3G",
    "claude key sk-ant-api03-Qw1Er2Ty3Ui4Op5As6Df7Gh8Jk9": "sk-ant-api03-Qw1Er2Ty3Ui4Op5As6Df7Gh8Jk9",
    "gcloud access ya29.a0AfH6SMBx9Yz8Wv7Ut6Sr5Qp4On3Ml2": "ya29.a0AfH6SMBx9Yz8Wv7Ut6Sr5Qp4On3Ml2",
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


@pytest.mark.parametrize("line", list(SECRETS))
def test_the_masking_rules_catch_every_kind(line):
    assert not _leaks(mask_secrets(line)), line
    assert not _leaks(mask_secrets(PEM))


@pytest.mark.parametrize("text", ["my-secret-project: could not reach the bucket", "passwordless_sudo: true",
                                  "token_budget=12", "SECRET_SAUCE_ENABLED: yes please", "--secret-santa-list names"])
def test_a_name_that_only_mentions_a_secret_word_keeps_its_value(text):
    assert mask_secrets(text) == text


def test_a_secret_cut_by_the_evidence_limit_leaves_no_prefix(run):
    """Evidence is cut at 500 characters: a token straddling the cut must not leave its start behind."""
    for secret in ("hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa98765432", "ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8",
                   "sk-proj-Lm9Nb8Vc7Xz6Qa5Ws4Ed3Rf2Tg1", "xoxb-918273645019-564738291047-QwErTyUiOpAsDfGh"):
        head = OOM.format(line="")
        line = head + "x" * (494 - len(head)) + " " + secret + " tail"
        ev = run(line + "\n").findings[0].evidence[0].text
        assert len(ev) <= 500 and secret[:4] not in ev and ev.endswith(">"), ev[-30:]


def test_no_secret_reaches_text_json_or_the_store(run, tmp_path):
    from bot.answer.render import diagnosis_text
    from bot.store.store import Store
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
    from bot.answer.llm import LLMConfig, Phraser
    from bot.store.store import Store
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
