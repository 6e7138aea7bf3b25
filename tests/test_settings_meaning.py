"""Settings and team files checked for what they mean, not only their shape (issue 31, items 19 and 20)."""
from datetime import datetime, timezone

import pytest

from bot.schedule import Cron, CronError


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
