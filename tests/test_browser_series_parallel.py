"""The viewer in a real browser for series_parallel (tests/test_browser.py says what is checked and how; one
scenario per module, so that the test workers share the browser tests out)."""

from test_browser import browser, check_plant_shown, pytestmark  # noqa: F401, F811 — the fixture and the skip marks


def test_live_replay_and_html_show_the_plant_series_parallel(browser, tmp_path):
    check_plant_shown(browser, tmp_path, "series_parallel")
