"""Issue 32: the README is short and links every docs page; what README and docs/ show that is computed (the symptom
page, the example answers, the keyword baseline, the planner's table) is what `make docs` computes now; the bundled
examples say what their names say, and agree with themselves."""
import importlib.util
import json
import re
import tarfile

from conftest import ROOT

DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pages():
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path) -> set[str]:
    text = re.sub(r"(?ms)^(`{3,}).*?^\1\s*$", "", path.read_text(encoding="utf-8"))   # headings outside code only
    return {_slug(m.group(1)) for m in re.finditer(r"(?m)^#{1,6} (.+)$", text)}


def test_generated_parts_of_readme_and_docs_are_current():
    """docs/symptoms.md and every generated block equal what `make docs` writes now."""
    stale = [rel for rel, text in _generator().expected().items()
             if (ROOT / rel).read_text(encoding="utf-8") != text]
    assert stale == [], f"run `make docs`: {stale}"


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_readme_links_every_docs_page_and_each_one_exists():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {t.split("#")[0] for t in LINK.findall(readme) if t.startswith("docs/")}
    on_disk = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert on_disk - linked == set(), "docs pages the README does not link"
    assert linked - on_disk == set(), "README links to docs pages that do not exist"


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in _pages():
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("<"):
                continue   # https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def test_corpus_and_plan_tables_live_in_their_docs_pages():
    from bot.cli.evaluate import TABLE_BEGIN
    assert TABLE_BEGIN in (DOCS / "corpus.md").read_text(encoding="utf-8")
    assert TABLE_BEGIN not in (ROOT / "README.md").read_text(encoding="utf-8")


EXPECTED = {   # example -> the root cause `make demo` shows for it (None: healthy)
    "dmesg-xid79.log": "gpu_xid",
    "efa-register-mr-rc22.log": "efa_mr_registration",
    "healthy-efa-init.log": None,
    "megatron-slow-straggler.log": "straggler",
    "nccl-hang-lagging-rank.log": "nccl_timeout",
    "p5-megatron-oom.log": "cuda_oom",
    "p5-tcp-fallback.log": "tcp_fallback",
    "megatron-loss-spike.log.gz": "loss_spike",
}


def test_every_example_is_named_for_what_it_shows():
    gen = _generator()
    examples = sorted(p.name for p in (ROOT / "examples").iterdir()
                      if p.is_file() and (p.suffix == ".log" or p.name.endswith(".log.gz")))
    assert examples == sorted(EXPECTED)
    out = gen._triage("diagnose", "--json", *(f"examples/{n}" for n in examples))
    got = {}
    for line in out.splitlines():
        d = json.loads(line)
        got[d["input"]["name"]] = d["findings"][0]["symptom"] if d["findings"] else None
    assert got == EXPECTED


def test_the_two_node_example_is_one_job_read_together_from_its_folder_or_its_archive():
    gen = _generator()
    nodes = sorted((ROOT / "examples" / "job-7781").glob("*.out"))
    with tarfile.open(ROOT / "examples" / "job-7781-logs.tar.gz") as tf:
        members = {m.name: tf.extractfile(m).read() for m in tf.getmembers()}
    assert members == {f"job-7781/{p.name}": p.read_bytes() for p in nodes}   # the archive holds the same files
    answers = [json.loads(gen._triage("diagnose", "--json", "--together", target))
               for target in ("examples/job-7781/", "examples/job-7781-logs.tar.gz")]
    for d in answers:
        top = d["findings"][0]
        assert top["symptom"] == "nccl_timeout" and d["findings"][1:] == []
        assert top["facts"]["lagging_hosts"] == ["p5-st-2"] and top["facts"]["lagging_ranks"] == list(range(8, 16))
        assert top["facts"]["world_size"] == 16
    assert answers[0]["findings"][0]["facts"] == answers[1]["findings"][0]["facts"]


def test_the_straggler_example_agrees_with_its_own_arguments():
    """The argument dump, the iteration lines and the straggler reports describe one job."""
    text = (ROOT / "examples" / "megatron-slow-straggler.log").read_text(encoding="utf-8")
    arg = {k: v for k, v in re.findall(r"(?m)^  (\w+) \.+ (\S+)$", text)}
    world, dp, tp, pp = (int(arg[k]) for k in ("world_size", "data_parallel_size", "tensor_model_parallel_size",
                                              "pipeline_model_parallel_size"))
    gbs, mbs, interval = int(arg["global_batch_size"]), int(arg["micro_batch_size"]), int(arg["log_interval"])
    assert world == dp * tp * pp
    assert f"setting number of microbatches to constant {gbs // (mbs * dp)}" in text
    iters = [(int(i), int(n), int(s), int(g)) for i, n, s, g in re.findall(
        r"iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \|.*?global batch size: +(\d+)", text)]
    assert iters and all(n == int(arg["train_iters"]) and g == gbs and s == i * gbs and i % interval == 0
                         for i, n, s, g in iters)
    ranks = [int(r) for r in re.findall(r"(?:ms|W|C|MHz|%|TF)/(\d+)", text)]
    assert ranks and max(ranks) < world
    stamps = re.findall(r"(?m)^ ?\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]", text)
    assert stamps == sorted(stamps)
