"""The HTML trajectory inspector in a real headless browser (Debian's chromium, driven by Selenium).

Skips only when no browser can be used here: setup.sh installs chromium and its driver where it
can (root with apt-get), and the dev extra installs Selenium.
"""

from __future__ import annotations

import shutil

import pytest

from agentgym.models import Generation
from agentgym.offline.inspection import render_html
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.trajectory import TrajectoryBuilder

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install 'agentgym[dev]')")
from selenium.webdriver.common.by import By  # noqa: E402

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
COLOURS = {"sampled": "rgba(183, 240, 192, 1)", "env": "rgba(207, 227, 255, 1)", "prompt": "rgba(232, 232, 232, 1)"}


@pytest.fixture(scope="module")
def browser():
    if BROWSER is None or DRIVER is None:
        pytest.skip("no chromium and chromedriver here (setup.sh installs them with apt-get when run as root)")
    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    yield driver
    driver.quit()


def test_the_inspector_page_renders_trained_and_masked_tokens(browser, default_tokenizer, tmp_path):
    tokenizer = default_tokenizer
    builder = TrajectoryBuilder(ChatRenderer(tokenizer), [{"role": "user", "content": "Say <hi> with an emoji"}])
    reply = tokenizer("Hi ꙮ <b>", add_special_tokens=False)["input_ids"]
    builder.add_generation(Generation(tuple(reply), tuple([-0.5] * len(reply)), "Hi ꙮ <b>", "stop"))
    builder.add_messages([{"role": "tool", "content": "tool & output", "name": "t", "tool_call_id": "c"}])
    trajectory = builder.build()
    page = tmp_path / "trajectory.html"
    page.write_text(render_html(trajectory, tokenizer, title="episode <1>"), encoding="utf-8")

    browser.get(page.as_uri())
    assert browser.title == "episode <1>"
    sequence = browser.find_element(By.CSS_SELECTOR, ".seq")
    tokens = sequence.find_elements(By.CSS_SELECTOR, ".tok")
    # What the browser shows is the decoded sequence, newlines drawn as ⏎ (and kept as line breaks).
    shown = browser.execute_script("return arguments[0].textContent;", sequence)
    assert shown.replace("⏎\n", "\n") == tokenizer.decode(list(trajectory.token_ids))
    sampled = [t for t in tokens if "k-sampled" in t.get_attribute("class")]
    assert "".join(browser.execute_script("return arguments[0].textContent;", t) for t in sampled) == "Hi ꙮ <b>"
    assert all("logprob -0.500" in t.get_attribute("title") for t in sampled)  # the hover tooltip
    for kind, colour in COLOURS.items():
        styled = [t for t in tokens if f"k-{kind}" in t.get_attribute("class")]
        assert styled and {t.value_of_css_property("background-color") for t in styled} == {colour}, kind
    assert "tool & output" in "".join(t.text for t in tokens if "k-env" in t.get_attribute("class"))
    assert not browser.find_elements(By.TAG_NAME, "b")  # model text is escaped, never markup
    legend = browser.find_elements(By.CSS_SELECTOR, "p .tok")
    assert len(legend) == 4 and all(item.is_displayed() for item in legend)
    assert [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"] == []
