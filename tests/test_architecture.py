"""The layout holds: data flows one way, no import cycle, small modules and functions, one stem per family."""
import ast
import json
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT

PACKAGES = ("core", "knowledge", "parsers", "playbooks", "engine", "bot", "testkit", "tests", "bench")
# What each layer may import from the project (its own package always).
ALLOWED = {
    "core": set(),
    "knowledge": {"core"},
    "parsers": {"core"},
    "playbooks": {"core", "knowledge"},
    "engine": {"core", "parsers", "playbooks"},
    "bot": {"core", "knowledge", "playbooks", "engine"},   # parsers only through the engine (engine.options)
    "testkit": set(),
    "tests": {"core", "knowledge", "parsers", "playbooks", "engine", "bot", "testkit"},
    "bench": {"core", "knowledge", "parsers", "playbooks", "engine", "bot", "testkit"},
}
SOURCES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every project module a file imports, at module level or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if m.split(".")[0] in PACKAGES}


def test_sources_are_found():
    assert len(SOURCES) > 60 and any(p.parts[-2] == "engine" for p in SOURCES)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_imports_upwards(path):
    pkg = path.relative_to(ROOT).parts[0]
    bad = sorted(m for m in _imports(path) if m.split(".")[0] not in ALLOWED[pkg] | {pkg})
    assert bad == [], f"{pkg} may import only {sorted(ALLOWED[pkg])}"


# bot/ is one package per interface (its rooms) plus the glue at its top (settings, wiring, service): what each room
# may import from the others. The Slack bot and the command line never import each other (`triage serve` starts the
# bot through bot.wiring); the engine's layers below never import bot at all (ALLOWED above).
BOT_ROOMS = {
    "settings": {"proactive"},                       # (the cron schedule's own check of TRIAGE_REPORT_CRON / TRIAGE_TZ)
    "service": {"store"},
    "wiring": {"service", "answer", "store", "slack"},
    "answer": {"settings"},
    "store": {"settings"},
    "patch": {"answer"},
    "report": {"service", "store", "slack"},
    "slack": {"settings", "wiring", "service", "answer", "store", "patch", "report"},
    "proactive": {"settings", "wiring", "answer", "store", "slack"},
    "fleet": {"settings", "wiring", "answer", "store", "proactive"},
    "cli": {"settings", "wiring", "service", "answer", "store", "patch", "proactive", "report", "fleet"},
}
BOT_SOURCES = [p for p in SOURCES if p.relative_to(ROOT).parts[0] == "bot"]


def _room(module: str) -> str | None:
    """bot.slack.app → slack, bot.settings → settings; None for bot itself and for what is not bot's."""
    parts = module.split(".")
    return parts[1] if parts[0] == "bot" and len(parts) > 1 else None


def test_every_bot_module_lives_in_a_known_room():
    rooms = {p.relative_to(ROOT / "bot").parts[0].removesuffix(".py") for p in BOT_SOURCES} - {"__init__"}
    assert rooms == set(BOT_ROOMS)
    for package in (p for p in (ROOT / "bot").iterdir() if p.is_dir() and p.name != "__pycache__"):
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc) > 80, f"bot/{package.name}/__init__.py says what the package holds"


@pytest.mark.parametrize("path", BOT_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_bot_rooms_import_only_what_they_may(path):
    own = _room(_module(path))
    if own is None:   # bot/__init__.py
        assert not {m for m in _imports(path) if m.startswith("bot.")}
        return
    bad = sorted(m for m in _imports(path) if _room(m) not in (None, own) and _room(m) not in BOT_ROOMS[own])
    assert bad == [], f"bot.{own} may import only {sorted(BOT_ROOMS[own])} of bot's other rooms"


def test_slack_and_cli_never_import_each_other_and_bot_never_imports_parsers():
    assert "cli" not in BOT_ROOMS["slack"] and "slack" not in BOT_ROOMS["cli"]
    assert not any("cli" in allowed for allowed in BOT_ROOMS.values())   # nothing but the entry point runs the CLI
    assert "parsers" not in ALLOWED["bot"]
    for path in BOT_SOURCES:
        assert not {m for m in _imports(path) if m.split(".")[0] == "parsers"}, path
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):   # nor by name (import_module("parsers…"))
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not node.value.startswith(("parsers.", "bot.cli", "bot.slack")) or \
                    _room(_module(path)) in {"wiring", "slack", "cli"}, (path, node.value)


def test_every_package_is_installed():
    """pyproject lists the packages one by one: a sub-package left out would be missing from a fresh install."""
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for top in ("bot", "core", "engine", "parsers", "playbooks",
                                                                    "knowledge") for p in (ROOT / top).rglob("__init__.py")}
    assert listed == found
    script = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["triage"]
    module, _, function = script.partition(":")
    assert (ROOT / (module.replace(".", "/") + ".py")).exists() and f"def {function}(" in \
        (ROOT / (module.replace(".", "/") + ".py")).read_text()


def test_the_engine_exposes_what_settings_check():
    from engine.options import BACKENDS, LOSS_OPTIONS, OPTION_TYPES, parse_options
    from parsers.convergence import LossParser
    from parsers.scan.backends import BACKENDS as SCANNER_BACKENDS
    assert LOSS_OPTIONS is LossParser.Options and OPTION_TYPES == (LOSS_OPTIONS,) and BACKENDS == SCANNER_BACKENDS
    assert parse_options(LOSS_OPTIONS, "rel=0.5").rel == 0.5


def test_no_import_cycle():
    modules = {_module(p): p for p in SOURCES}
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for n in graph[m]:
            if state.get(n) == 1:
                raise AssertionError(" -> ".join([*stack, m, n]))
            if n not in state:
                visit(n, [*stack, m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))   # bench/ too
def test_small_modules_and_functions(path):
    src = path.read_text(encoding="utf-8")
    assert src.count("\n") <= 400
    long = [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(src))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80]
    assert long == []


def test_every_family_has_its_three_homes():
    from core.symptoms import SYMPTOMS
    for s in SYMPTOMS.values():
        package = ROOT / "parsers" / s.family   # a family grown into several modules is a package of that name
        parser = package / "__init__.py" if package.is_dir() else ROOT / "parsers" / f"{s.family}.py"
        playbook = ROOT / "playbooks" / f"{s.family}.yaml"
        runbook = ROOT / "knowledge" / f"{s.family}.md"
        assert parser.exists() and playbook.exists() and runbook.exists(), s.id
        # a family may spill into <family>_*.py beside it, or into the other modules of its package
        homes = [parser, *sorted(package.glob("*.py") if package.is_dir() else parser.parent.glob(f"{s.family}_*.py"))]
        assert any(f'"{s.id}"' in p.read_text() for p in homes), f"{parser.name} does not emit {s.id}"
        assert f"symptom: {s.id}" in playbook.read_text() or s.id in playbook.read_text(), playbook.name


def test_every_fact_a_finding_carries_is_declared_in_the_registry(run):
    from core.symptoms import SYMPTOMS
    seen: dict[str, set[str]] = {}
    for path in sorted(FIXTURES.rglob("*.log")):
        for f in run(path.read_bytes()).findings:
            seen.setdefault(f.symptom, set()).update(f.facts)
    corpora = sorted((ROOT / "tests" / "corpus").glob("*.jsonl")) + [ROOT.parent / "shared" / "corpus" / "dev.jsonl"]
    for corpus in filter(Path.exists, corpora):   # (the project's corpus too: a fact seen only there drifted before)
        for line in filter(str.strip, corpus.read_text(encoding="utf-8").splitlines()):
            for f in run(json.loads(line)["text"]).findings:
                seen.setdefault(f.symptom, set()).update(f.facts)
    undeclared = {s: sorted(keys - set(SYMPTOMS[s].facts)) for s, keys in seen.items()}
    assert {s: k for s, k in undeclared.items() if k} == {}


def test_tests_and_bench_do_not_import_each_other():
    for path in SOURCES:
        pkg = path.relative_to(ROOT).parts[0]
        other = {"tests": "bench", "bench": "tests"}.get(pkg)
        if other:
            assert not any(m.split(".")[0] == other for m in _imports(path)), path


def test_the_engine_reads_no_environment():
    for path in [*(ROOT / "engine").rglob("*.py"), *(ROOT / "parsers").rglob("*.py"), *(ROOT / "playbooks").rglob("*.py")]:
        text = path.read_text()
        assert "os.environ" not in text and "getenv" not in text, path


def test_versions_compare_with_missing_parts_as_zero():
    from core.versions import BY_ID, compare
    assert compare("1.18", "ge", "1.18.0") and compare("1.18.0", "le", "1.18") and compare("2.19.3", "gt", "2.19")
    assert not compare("1.17.2", "ge", "1.18") and not compare(None, "ge", "1.0")
    rule = BY_ID["efa_sync_memops"]
    assert rule.holds({"efa_installer": "1.29.0", "nccl": "2.19"}) is True
    assert rule.holds({"efa_installer": "1.29.1", "nccl": "2.19"}) is False     # just outside the range
    assert rule.holds({"nccl": "2.19"}) is None                                   # installer not in the log
