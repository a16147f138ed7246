"""The leaderboard page in a real headless browser: Debian's chromium driven through its chromedriver
(Selenium), against a real ``ratings api`` process on matches rated by the session's workers.

Set ``RATINGS_TEST_SCREENSHOTS`` to a folder to keep the screenshots (docs/img/leaderboard.png was
made so); otherwise they go to the test's temporary folder.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from ..test_chronological import elo_message

PLAYERS = [f"player-{i:02}" for i in range(40)]


def _chromedriver() -> str:
    found = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)
    if found is None:
        pytest.fail("chromedriver is missing: install Debian's chromium and chromium-driver (.ci/run does)")
    return found


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A headless chromium (Selenium WebDriver), 1000x900."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,900",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(arg)
    if Path("/usr/bin/chromium").exists():
        options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service(_chromedriver()), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def ladder(env, module_publisher, api):
    """90 Elo matches among 40 players, rated by the workers (the tables emptied first)."""
    from ..conftest import TABLES

    with env.connect() as conn:
        conn.execute(f"TRUNCATE {TABLES}, annulments RESTART IDENTITY CASCADE")
    rng = random.Random(5)
    matches = []
    for i in range(90):
        a, b = rng.sample(PLAYERS, 2) if i >= 20 else (PLAYERS[2 * i], PLAYERS[2 * i + 1])
        m = elo_message(f"page-{i:03}", a, b, 0, 7)
        m["finished_at"] = f"2026-05-07T{i // 60:02}:{i % 60:02}:00Z"
        matches.append(m)
    for m in matches:
        module_publisher(m)
    env.wait_drained(len(matches))
    return matches


def _shot(driver, name: str, tmp_path: Path) -> None:
    folder = Path(os.environ.get("RATINGS_TEST_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(folder / name))


def test_the_page_pages_through_the_leaderboard_finds_a_player_and_draws_the_history(
        env, api, ladder, browser, tmp_path):
    """Open the ladder's page, follow "Next page" to the end (every player once, ratings falling),
    search a player by prefix, open a player from the board and see the rating chart with one
    point per match plus the start, and the history table."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.expected_conditions import staleness_of
    from selenium.webdriver.support.wait import WebDriverWait

    browser.get(f"{api.base}/ladders/elo")
    _shot(browser, "leaderboard.png", tmp_path)
    seen: list[tuple[str, float]] = []
    pages = 0
    while True:
        pages += 1
        for row in browser.find_elements(By.CSS_SELECTOR, "#leaderboard tr")[1:]:
            cells = row.find_elements(By.TAG_NAME, "td")
            seen.append((cells[1].text, float(cells[2].text)))
        nexts = browser.find_elements(By.ID, "next")
        if not nexts:
            break
        nexts[0].click()
    with env.connect() as conn:
        stored = dict(conn.execute("SELECT player_id, round(rating::numeric, 1)::float8 FROM players"
                                   " WHERE ladder = 'elo'").fetchall())
    assert pages == 2  # 40 players, 25 a page
    assert sorted(p for p, _ in seen) == sorted(stored) and len(seen) == len(stored)
    assert dict(seen) == stored
    assert [r for _, r in seen] == sorted((r for _, r in seen), reverse=True)

    search = browser.find_element(By.NAME, "q")
    search.clear()
    search.send_keys("player-3")
    board = browser.find_element(By.ID, "leaderboard")
    search.submit()
    WebDriverWait(browser, 30).until(staleness_of(board))  # the answer's page, not the one submitted from
    found = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#leaderboard a.player")]
    assert found == [f"player-3{i}" for i in range(10)]

    browser.get(f"{api.base}/ladders/elo")
    top = browser.find_element(By.CSS_SELECTOR, "#leaderboard a.player")
    name = top.text
    top.click()
    assert browser.find_element(By.TAG_NAME, "h1").text == name
    chart = browser.find_element(By.ID, "rating-chart")
    assert chart.is_displayed() and chart.size["width"] > 300
    games = sum(name in (m["side_a"]["players"][0]["player_id"], m["side_b"]["players"][0]["player_id"])
                for m in ladder)
    points = browser.find_element(By.CSS_SELECTOR, "#rating-chart polyline").get_attribute("points")
    assert points is not None and len(points.split()) == games + 1
    assert len(browser.find_elements(By.CSS_SELECTOR, "#history tr")) == games + 1  # a header row
    _shot(browser, "player.png", tmp_path)
