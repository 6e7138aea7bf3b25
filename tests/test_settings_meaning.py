"""Settings and team files checked for what they mean, not only their shape (issue 31, items 19 and 20)."""
from datetime import datetime, timezone

import pytest

from bot.proactive.schedule import Cron, CronError


def test_a_cron_that_fires_only_in_leap_years_is_valid_and_scheduled():
    assert Cron("0 9 29 2 *").next_after(datetime(2026, 12, 2, tzinfo=timezone.utc)) == \
        datetime(2028, 2, 29, 9, 0, tzinfo=timezone.utc)
    assert Cron("30 9 * * 1").next_after(datetime(2026, 12, 2, tzinfo=timezone.utc)) == \
        datetime(2026, 12, 7, 9, 30, tzinfo=timezone.utc)


@pytest.mark.parametrize("expr", ["0 9 31 2 *", "0 9 30,31 2 *", "0 9 31 4,6 *"])
def test_a_cron_on_a_date_no_calendar_has_is_refused_at_once(expr):
    with pytest.raises(CronError, match="never fire"):
        Cron(expr)


def test_settings_refuse_a_rate_limit_that_refuses_everyone_and_an_impossible_cron():
    from bot.settings import Settings, SettingsError
    for env in ({"TRIAGE_RATE_LIMIT": "0/60"}, {"TRIAGE_RATE_LIMIT": "20/0"}, {"TRIAGE_REPORT_CRON": "0 9 31 2 *"}):
        with pytest.raises(SettingsError):
            Settings.from_env(env)
    assert Settings.from_env({"TRIAGE_RATE_LIMIT": "1/1", "TRIAGE_REPORT_CRON": "0 9 29 2 *"})


def test_a_yaml_alias_bomb_in_a_team_playbook_is_refused_quickly(tmp_path):
    from playbooks.engine import PlaybookError, load
    bomb = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcd"):   # (small: without the check it loads, then fails for another reason)
        prev = "abcd"[i]
        bomb.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    (tmp_path / "team.yaml").write_text("\n".join(bomb) + "\nplaybooks: []\n")
    with pytest.raises(PlaybookError, match="aliases"):
        load([tmp_path])


def _team(tmp_path, pattern, literal="fsx-err"):
    (tmp_path / "team.yaml").write_text(
        "symptoms:\n  - {id: team_fsx, title: FSx lost}\n"
        f"rules:\n  - {{id: fsx.lost, symptom: team_fsx, pattern: '{pattern}', literal: {literal}, title: FSx lost}}\n")


def test_a_team_pattern_with_a_repeat_inside_a_repeat_is_refused_at_load(tmp_path):
    from playbooks.engine import PlaybookError, load
    _team(tmp_path, "fsx-err (a+)+$")
    with pytest.raises(PlaybookError, match="repeat inside a repeat"):
        load([tmp_path])
    _team(tmp_path, "fsx-err (?P<code>[0-9]+) on (?P<mount>/[a-z]+)")   # near miss: ordinary groups load
    assert load([tmp_path]).rules


def test_a_team_rule_that_blows_its_budget_is_switched_off_with_a_note(monkeypatch):
    """Bounded per log, not per line: a rule that times out stops reading this log, and the answer says so."""
    from parsers import team
    from parsers.scan.base import Context, Hit
    monkeypatch.setattr(team, "RX_TIMEOUT", 0.05)
    rule = {"id": "slow.rule", "symptom": "nccl_error", "pattern": r"fsx-err (a|aa)+$", "literal": "fsx-err",
            "title": "t", "confidence": 0.5, "severity": None}
    r = team.TeamRules((rule,))
    line = "fsx-err " + "a" * 60 + "b"
    for no in range(1, 41):
        r.feed(Hit(no, line))
    ctx = Context()
    assert r.finish(ctx) == [] and "slow.rule" in r.off
    assert ctx.notes and "switched off" in ctx.notes[0] and "line 1" in ctx.notes[0]
    assert r.spent["slow.rule"] < 1.0    # one timeout, then no more time on this log
