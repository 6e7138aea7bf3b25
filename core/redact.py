"""Masking rules as data. SECRETS are masked everywhere text is kept or shown (evidence, the store, logs);
IDENTIFIERS (addresses, hostnames, e-mails) are masked additionally before text leaves the process (LLM).

`Masker` gives stable, reversible placeholders (`<AWS_KEY_1>`), so an answer written about masked text can be
turned back into the real values for the person who asked."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_SECRET_WORD = r"(?:password|passwd|pwd|api[_-]?key|secret|token|access[_-]?key|auth[_-]?key|credentials?)"
# A value after `name=` / `name:` / `--name`: a quoted one up to its closing quote (it may hold spaces, ';' or ','),
# else everything up to white space or a quote. A placeholder already put there is left as it is. Four characters
# at least, unless the text ends there (a value cut by an evidence limit still hides its start).
_VALUE = (r"""(?:"(?!<[A-Z][A-Z0-9_]*>)([^"\n]{1,400})"|'(?!<[A-Z][A-Z0-9_]*>)([^'\n]{1,400})'|"""
          r"""(?!<[A-Z][A-Z0-9_]*>)([^\s"']{4,}|[^\s"']{1,3}\Z))""")
_NAME = r"(?P<name>[A-Za-z0-9_-]*?" + _SECRET_WORD + r"[A-Za-z0-9_-]*)"
# Every kind, with the services people log in to from a training job. (name, pattern, group(s) holding the
# sensitive part: the first that took part in the match; 0 for the whole match). ASCII word boundaries, so a value
# followed by Korean text (ip-10-1-2-3를) is still found. tests/test_secrets_everywhere.py has one case per kind.
SECRETS: tuple[tuple[str, re.Pattern, int | tuple[int, ...]], ...] = (
    ("AWS_KEY", re.compile(r"\b((?:AKIA|ASIA|AIDA|AROA)[A-Z0-9]{16})\b", re.ASCII), 1),
    ("AWS_SECRET", re.compile(r"(?i)(?:aws_secret_access_key|secret_?access_?key|SecretAccessKey)[\"'\s:=]+([A-Za-z0-9/+=]{40})", re.ASCII), 1),
    # Slack bot/user/app tokens and the rotating ones (xoxe-…, xoxe.xoxp-…)
    ("SLACK_TOKEN", re.compile(r"\b(xox[a-z](?:\.xox[a-z])?-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,})", re.ASCII), 1),
    ("GITHUB_TOKEN", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})", re.ASCII), 1),
    ("GITLAB_TOKEN", re.compile(r"\b(glpat-[A-Za-z0-9_-]{20,})", re.ASCII), 1),
    ("HF_TOKEN", re.compile(r"\b(hf_[A-Za-z0-9]{30,})", re.ASCII), 1),
    ("OPENAI_KEY", re.compile(r"\b(sk-(?:proj-|ant-[a-z0-9]+-)?[A-Za-z0-9_-]{20,})", re.ASCII), 1),
    ("NGC_KEY", re.compile(r"\b(nvapi-[A-Za-z0-9_-]{20,})", re.ASCII), 1),
    ("DATABRICKS_TOKEN", re.compile(r"\b(dapi[0-9a-f]{32}(?:-\d+)?)\b", re.ASCII), 1),
    ("GOOGLE_KEY", re.compile(r"\b(AIza[0-9A-Za-z_-]{35})", re.ASCII), 1),
    ("GOOGLE_OAUTH", re.compile(r"\b(ya29\.[0-9A-Za-z_-]{20,})", re.ASCII), 1),
    ("GCP_KEY_ID", re.compile(r"(?i)private_key_id[\"']?\s*[:=]\s*[\"']?([0-9a-f]{16,})", re.ASCII), 1),
    ("AZURE_KEY", re.compile(r"(?i)\b(?:AccountKey|SharedAccessKey|SharedAccessSignature)\s*=\s*([^;\s\"']+)", re.ASCII), 1),
    ("AZURE_SAS", re.compile(r"(?<![A-Za-z0-9_])sig=([A-Za-z0-9%+/=_-]{8,})", re.ASCII), 1),
    ("WANDB_KEY", re.compile(r"(?i)\bwandb\s+login\b(?:\s+--?[a-z-]+)*\s+([0-9a-f]{40})\b", re.ASCII), 1),
    ("JWT", re.compile(r"\b(eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})", re.ASCII), 1),
    # an Authorization header's credentials, however short (Basic dXNlcjpwdw==); elsewhere a long token only
    ("BEARER", re.compile(r"(?i)\b(?:Proxy-)?Authorization[\"']?\s*[:=]\s*[\"']?(?:(?:Bearer|Basic|Token|Digest|"
                          r"Negotiate)\s+)?([^\s\"',;]+)", re.ASCII), 1),
    ("BEARER", re.compile(r"(?i)\b(?:Bearer|Basic|Token)\s+([A-Za-z0-9._~+/=-]{16,})", re.ASCII), 1),
    ("BEARER", re.compile(r"(?i)\bBearer\s+([A-Za-z0-9._~+/=-]{1,15})\Z", re.ASCII), 1),
    ("PRIVATE_KEY", re.compile(r"(-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z))", re.ASCII | re.S), 1),
    # scheme://user:password@host, the user may be empty (redis://:pw@host); a password may hold '/', a port
    # followed by a path is not one
    ("URL_PASSWORD", re.compile(r"([a-z][a-z0-9+.-]*://[^\s:/@]*:)(?!\d+(?:/|$))([^\s@]+)(@)", re.ASCII), 2),
    # NAME=value and name: value where the name holds a secret word (WANDB_API_KEY, PGPASSWORD, MLFLOW_TRACKING_TOKEN,
    # CLIENT_SECRET_VALUE), and flags such as --password VALUE; not max_tokens, --tokenizer, "token drop rate: 18%",
    # nor a name that only mentions one (my-secret-project: could …, see _secret_name)
    ("PASSWORD", re.compile(r"(?i)(?<![A-Za-z0-9_-])" + _NAME + r"[\"']?\s*[:=]\s*" + _VALUE, re.ASCII), (2, 3, 4)),
    ("PASSWORD", re.compile(r"(?i)(?<![\w-])--?" + _NAME + r"(?:=|[ \t]+)" + _VALUE, re.ASCII), (2, 3, 4)),
    # a known token's start at the very end of a text: the rest was cut off (evidence is cut at 500 characters)
    ("CUT_SECRET", re.compile(r"(?<![A-Za-z0-9_])((?:AKIA|ASIA|xox[a-z]|xapp|gh[pousr]_|github_pat_|glpat-|hf_|sk-|"
                              r"nvapi-|dapi[0-9a-f]|AIza|ya29\.|eyJ)[A-Za-z0-9._-]*)\Z", re.ASCII), 1),
    ("ACCOUNT_ID", re.compile(r"(?<!\d)(\d{12})(?!\d)", re.ASCII), 1),  # only on lines with AWS context, see below
)
# What may follow the secret word in a name whose value is masked (CLIENT_SECRET_VALUE, SECRET_KEY, TOKEN_B64);
# any other tail makes it a name about something else (my-secret-project, passwordless_sudo, token_budget).
_TAIL_OK = frozenset({"", "value", "val", "str", "string", "b64", "base64", "raw", "data", "key", "base", "hash"})
_SECRET_WORD_RE = re.compile(_SECRET_WORD, re.I)


def _secret_name(name: str) -> bool:
    """Whether a name that holds a secret word names a secret: nothing, or only _TAIL_OK parts, after its last one."""
    last = None
    for last in _SECRET_WORD_RE.finditer(name):
        pass
    if last is None:
        return False
    tail = re.split(r"[_-]", name[last.end():].lower())
    return all(t in _TAIL_OK or t.isdigit() or re.fullmatch(r"v\d+", t) for t in tail)


IDENTIFIERS: tuple[tuple[str, re.Pattern, int], ...] = (
    ("EMAIL", re.compile(r"\b([A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,})\b", re.ASCII), 1),
    ("EC2_HOST", re.compile(r"\b(ip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}(?:\.[\w.-]+)?)\b", re.ASCII), 1),
    ("IPV4", re.compile(r"(?<![\d.])((?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3})(?![\d.])", re.ASCII), 1),
    ("IPV6", re.compile(r"(?<![\w:.])((?=[0-9a-fA-F:]*::|(?:[0-9a-fA-F]{1,4}:){7})(?:[0-9a-fA-F]{0,4}:){2,7}[0-9a-fA-F]{1,4})(?![\w:])", re.ASCII), 1),
    # an S3 bucket names the owner's data; a fully qualified host outside NCCL's prefix (a peer, a file server)
    # names their network — three labels or more ending in a domain suffix, so module paths (torch.distributed) stay
    ("S3_BUCKET", re.compile(r"\bs3a?://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?=/|\s|$)", re.ASCII), 1),
    ("FQDN", re.compile(r"(?<![\w.-])((?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){2,}"
                        r"(?:com|net|org|io|ai|edu|gov|internal|local|lan|corp|cluster|cloud|dev))(?![\w-])", re.ASCII), 1),
)
# A 12-digit number is only an account id next to AWS words; elsewhere it is a count (NumelIn, bytes).
_ACCOUNT_CONTEXT = re.compile(r"(?i)arn:aws|account|aws_|\.amazonaws\.com|iam::")
# Cheap substring checks (on the lower-cased line) decide whether a line needs the rules at all.
_HINTS = ("akia", "asia", "aida", "aroa", "xox", "xapp-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "hf_",
          "sk-", "bearer", "basic ", "://", "secret", "passw", "pwd", "api_key", "api-key", "apikey", "token", "arn:aws",
          "account", "amazonaws", "iam::", "aiza", "eyj", "private key", "access_key", "access-key", "accesskey",
          "auth_key", "auth-key", "credential", "glpat-", "nvapi-", "dapi", "ya29.", "private_key", "sharedaccess",
          "sig=", "authorization", "wandb")
_HINT_RE = re.compile("|".join(re.escape(h) for h in _HINTS))


@dataclass
class Masker:
    """Replaces sensitive values with numbered placeholders and can put them back."""
    identifiers: bool = False
    forward: dict[str, str] = field(default_factory=dict)   # real -> placeholder
    counts: dict[str, int] = field(default_factory=dict)
    literals: dict[str, str] = field(default_factory=dict)  # known names (hosts from the log) -> kind

    def seed(self, values, kind: str = "HOST") -> None:
        """Mask these exact strings too (hostnames the parsers found, which no pattern can recognise)."""
        for v in values:
            if isinstance(v, str) and len(v) >= 3:
                self.literals[v] = kind

    def _placeholder(self, kind: str, real: str) -> str:
        if real not in self.forward:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.forward[real] = f"<{kind}_{self.counts[kind]}>"
        return self.forward[real]

    def mask(self, text: str) -> str:
        if not text:
            return text
        text = _apply(SECRETS + (IDENTIFIERS if self.identifiers else ()), text, self._placeholder)
        if self.identifiers:
            for lit in sorted(self.literals, key=len, reverse=True):
                if lit in text:
                    text = re.sub(r"(?<![A-Za-z0-9_.-])" + re.escape(lit) + r"(?![A-Za-z0-9_-])",
                                  lambda m, lit=lit: self._placeholder(self.literals[lit], lit), text)
        return text

    def mask_value(self, v):
        """`mask` over every string in a structure (dicts, lists), never over its serialised text."""
        return _walk(v, self.mask)

    def unmask(self, text: str) -> str:
        for real, ph in sorted(self.forward.items(), key=lambda kv: -len(kv[1])):
            text = text.replace(ph, real)
        return text


def _apply(rules, text: str, placeholder) -> str:
    """Every rule over the text; `placeholder(kind, real)` gives what replaces each sensitive value."""
    for kind, pat, grp in rules:
        if kind == "ACCOUNT_ID" and not _ACCOUNT_CONTEXT.search(text):
            continue
        text = _sub(pat, grp, text, lambda real, kind=kind: placeholder(kind, real))
    return text


def _sub(pat: re.Pattern, grp: int | tuple[int, ...], text: str, repl) -> str:
    def one(m: re.Match) -> str:
        if grp == 0:
            return repl(m.group(0))
        g = grp if isinstance(grp, int) else next((i for i in grp if m.group(i) is not None), None)
        if g is None:
            return m.group(0)
        if "name" in pat.groupindex and not _secret_name(m.group("name")):   # not a secret's name: look on after it
            k = m.end("name") - m.start()
            return m.group(0)[:k] + _sub(pat, grp, m.group(0)[k:], repl)
        s, e = m.span(g)
        return m.group(0)[: s - m.start()] + repl(m.group(g)) + m.group(0)[e - m.start():]
    return pat.sub(one, text)


def mask_secrets(text: str) -> str:
    """Irreversible masking of secrets for text that is kept or shown (evidence, store, logs)."""
    if not text:
        return text
    if not _HINT_RE.search(text.lower()):
        return text
    return _apply(SECRETS, text, lambda kind, real: f"<{kind}>")


def mask_value(v):
    """mask_secrets over every string in a JSON-like structure: values are masked, never serialised text (a rule
    run over json.dumps output can swallow a JSON escape and leave invalid JSON behind)."""
    return _walk(v, mask_secrets)


def _walk(v, fn):
    if isinstance(v, str):
        return fn(v)
    if isinstance(v, dict):
        return {k: _walk(x, fn) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_walk(x, fn) for x in v]
    return v
