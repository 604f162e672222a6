"""The playground page at `/`, driven in headless Chromium (Debian's package, through playwright)
against a real server on loopback with the default model; what the page shows is checked against
what POST /v1/compress returns for the same threshold or keep_ratio."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

from .conftest import load_jsonl
from .test_server import serve

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
STATIC = Path(__file__).resolve().parents[1] / "src" / "thresher" / "server" / "static"
pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                reason="no Chromium installed: apt-get install -y chromium (the playground's "
                                       "browser test drives Debian's chromium; .ci/run installs it)")

# Unicode past U+FFFF (JS strings index UTF-16 units, the engine code points), titles, blank lines.
UNICODE_PASSAGES = ("## Snacks 🍕\nPizza 🍕 was first made in Naples. The margherita honours Queen Margherita. "
                    "Émile préfère les crêpes 🥞 au café.\n\n"
                    "Sushi 🍣 comes from Japan. It is eaten with soy sauce. Tokyo has many sushi bars.")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def url(default_compressor):
    with serve(default_compressor, max_wait_ms=5, max_queue_wait_s=100, request_timeout_s=120) as (base, _):
        yield base


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory) -> Path:
    """Screenshots land here ($THRESHER_ARTEFACTS when set, e.g. by CI, else a pytest tmp dir)."""
    root = os.environ.get("THRESHER_ARTEFACTS")
    path = Path(root) if root else tmp_path_factory.mktemp("playground")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def page(browser, url):
    """A fresh tab on the playground; records every request the page makes."""
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
    tab = context.new_page()
    tab.requests = []
    tab.on("request", lambda r: tab.requests.append((r.method, r.url)))
    errors = []
    tab.on("pageerror", lambda e: errors.append(e))
    tab.goto(url + "/")
    tab.wait_for_selector("body[data-ready=true]")
    yield tab
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def run_preset(page, index: int) -> dict:
    """Choose a preset, press Compress, wait for the rendered result; returns what was sent."""
    page.select_option("#preset", str(index))
    return submit(page)


def submit(page) -> dict:
    with page.expect_response(lambda r: r.url.endswith("/v1/compress")) as response:
        page.click("#run")
    assert response.value.status == 200, response.value.text()
    page.wait_for_selector("#passage-list .s")
    return page.evaluate("window.thresherPlayground.lastRequest()")


def api(url: str, request: dict, **options) -> dict:
    response = httpx.post(url + "/v1/compress", json={**request, **options}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def shown(page) -> dict:
    """Keep flags as rendered (highlight class and the computed strike-through must agree)."""
    return page.evaluate("""() => {
        const keep = {};
        for (const s of document.querySelectorAll('#passage-list .s')) {
            const struck = getComputedStyle(s).textDecorationLine.includes('line-through');
            if (s.classList.contains('kept') === struck) throw new Error('highlight and strike disagree');
            (keep[s.dataset.passage] ??= [])[Number(s.dataset.sentence)] = s.classList.contains('kept');
        }
        return {keep, view: window.thresherPlayground.view(), summary: document.getElementById('summary').textContent};
    }""")


def assert_matches(page, expected: dict) -> None:
    """The page's current selection equals the API's result `expected` (same request, same rule)."""
    got = shown(page)
    want_keep = {str(i): [s["kept"] for s in p["sentences"]] for i, p in enumerate(expected["passages"]) if p["sentences"]}
    assert got["keep"] == want_keep
    assert got["view"]["pruned"] == [p["pruned_text"] for p in expected["passages"]]
    assert got["view"]["rate"] == pytest.approx(expected["compression_rate"], abs=1e-12)
    assert f"{100 * expected['compression_rate']:.1f}% of characters removed" in got["summary"]


def compress_posts(page) -> int:
    return sum(1 for method, u in page.requests if method == "POST" and u.endswith("/v1/compress"))


def test_page_and_assets_are_served_from_the_package_with_nothing_external(url):
    page = httpx.get(url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for name in ("app.js", "style.css", "presets.json"):
        r = httpx.get(f"{url}/playground/{name}")
        assert r.status_code == 200 and r.content == (STATIC / name).read_bytes()
    for path in STATIC.iterdir():
        text = path.read_text(encoding="utf-8")
        if path.suffix != ".json":  # presets cite their sources; code and markup load nothing remote
            assert "http://" not in text and "https://" not in text and "//cdn" not in text, path.name
    assert httpx.get(url + "/playground/..%2Fapp.py").status_code == 404
    missing = httpx.get(url + "/playground/playground.py")
    assert missing.status_code == 404 and missing.json()["error"].startswith("no playground asset 'playground.py'")
    info = httpx.get(url + "/playground/info").json()
    assert info["model"] and isinstance(info["threshold"], float) and info["auth_required"] is False


def test_presets_are_real_dev_records_with_their_license():
    presets = json.loads((STATIC / "presets.json").read_text(encoding="utf-8"))["presets"]
    assert len(presets) >= 4 and all(p["license"] for p in presets)
    for preset in presets:
        record = next(r for r in load_jsonl(preset["source"]) if r["id"] == preset["id"])
        assert preset["question"] == record["question"]
        assert [p["text"] for p in preset["passages"]] == record_texts(record)


def record_texts(record: dict) -> list[str]:
    """A record's passage texts in each data set's layout (HotpotQA format, SQuAD, passage lists)."""
    if isinstance(record.get("context"), str):
        return [record["context"]]
    if "context" in record:
        return ["".join(sentences) for _, sentences in record["context"]]
    return [p["text"] for p in record["passages"]]


def test_preset_then_threshold_slider_matches_the_api_without_new_requests(page, url, artefacts):
    request = run_preset(page, 0)
    assert len(request["passages"]) == 10
    default = api(url, request)
    assert_matches(page, default)  # the model's default threshold before any slider move
    posts = compress_posts(page)

    scores = sorted({s["score"] for p in default["passages"] for s in p["sentences"]})
    page.focus("#threshold")
    for _ in range(5):  # keyboard: each ArrowLeft steps down to the next lower score
        page.keyboard.press("ArrowLeft")
    threshold = float(page.input_value("#threshold-value"))
    assert threshold in scores and threshold < default_threshold(page)
    lowered = api(url, request, threshold=threshold)
    kept = sum(s["kept"] for p in lowered["passages"] for s in p["sentences"])
    assert kept == sum(s >= threshold for p in default["passages"] for s in (x["score"] for x in p["sentences"]))
    assert kept > sum(s["kept"] for p in default["passages"] for s in p["sentences"])  # the move changed it
    assert_matches(page, lowered)
    page.keyboard.press("End")  # the top step keeps only the best-scoring sentence(s)
    assert float(page.input_value("#threshold-value")) == scores[-1]
    assert_matches(page, api(url, request, threshold=scores[-1]))
    for _ in range(3):
        page.keyboard.press("ArrowLeft")
    assert_matches(page, api(url, request, threshold=scores[-4]))
    assert compress_posts(page) == posts, "a slider move sent a request"
    page.fill("#threshold-value", repr(default_threshold(page)))
    page.evaluate("window.scrollTo(0, document.getElementById('results').offsetTop - 8)")
    page.focus("#passage-list .s.kept")  # shows one score's tooltip
    page.screenshot(path=str(artefacts / "playground.png"), full_page=False)
    copy_to = os.environ.get("THRESHER_PLAYGROUND_SCREENSHOT")
    if copy_to:
        shutil.copyfile(artefacts / "playground.png", copy_to)


def default_threshold(page) -> float:
    return page.evaluate("fetch('/playground/info').then(r => r.json()).then(i => i.threshold)")


@pytest.fixture(scope="module")
def cosine_url(cosine_compressor):
    with serve(cosine_compressor, max_wait_ms=5, request_timeout_s=120) as (base, _):
        yield base


@pytest.mark.parametrize("model", ["default", "minilm-cosine"])
def test_thresholds_at_and_beside_each_score_match_the_engine(browser, request, model):
    """Typed thresholds at a sentence's exact score and nudged by less than float32 resolution:
    the engine compares float32 scores (minilm-cosine) in float32 and float64 ones (the default
    pruner's means) in float64, and the page must do the same."""
    url = request.getfixturevalue("url" if model == "default" else "cosine_url")
    page = browser.new_page()
    page.goto(url + "/")
    page.wait_for_selector("body[data-ready=true]")
    sent = run_preset(page, 1)
    scores = np.array([s["score"] for p in api(url, sent)["passages"] for s in p["sentences"]])
    picks = np.unique(scores)[:: max(1, len(np.unique(scores)) // 4)]
    thresholds = [float(s) for s in picks] + [float(s) + 1e-9 for s in picks] + [float(s) - 1e-9 for s in picks]
    for t in thresholds:
        page.fill("#threshold-value", repr(t))
        assert_matches(page, api(url, sent, threshold=t))
    page.close()


def test_js_selection_and_assembly_equal_the_engine_functions(page):
    """The page's twins of reduce.keep_by_ratio / keep_by_threshold and result.pruned_text (with and
    without a sentence joiner) on random cases: ties, zero-length sentences, text past U+FFFF."""
    from thresher.engine.reduce import keep_by_ratio, keep_by_threshold
    from thresher.engine.result import pruned_text

    rng = np.random.default_rng(20)
    text = "Ab 🍕 cd. Éf gh! 🥞 Ij kl? Mn op. " * 3
    bounds = np.sort(rng.choice(np.arange(1, len(text)), size=11, replace=False))
    spans = np.stack([np.r_[0, bounds[:-1]], bounds], axis=1)
    spans[3, 1] = spans[3, 0]  # an empty sentence
    sentences = [{"start": int(a), "end": int(b)} for a, b in spans]
    for case in range(40):
        scores = rng.choice([0.1, 0.25, 0.5, 0.7], size=len(spans)).astype(np.float32 if case % 2 else np.float64)
        lengths = spans[:, 1] - spans[:, 0]
        ratio = float(rng.choice([0.05, 0.3, 0.5, 1 / 3, 0.99, 1.0]))
        threshold = float(rng.choice(scores)) + float(rng.choice([0.0, 1e-9, -1e-9]))
        got = page.evaluate("""([scores, lengths, ratio, threshold, text, sentences]) => {
            const p = window.thresherPlayground;
            const byRatio = p.keepByRatio(scores, lengths, ratio);
            return {byRatio, byThreshold: p.keepByThreshold(scores, threshold),
                    runs: p.prunedText([...text], sentences, byRatio, null),
                    joined: p.prunedText([...text], sentences, byRatio, " ")};
        }""", [scores.tolist(), lengths.tolist(), ratio, threshold, text, sentences])
        keep = keep_by_ratio(scores, lengths, ratio)
        assert got["byRatio"] == keep.tolist()
        assert got["byThreshold"] == keep_by_threshold(scores, threshold).tolist()
        assert got["runs"] == pruned_text(text, spans, keep)
        assert got["joined"] == pruned_text(text, spans, keep, " ")


def test_keep_ratio_control_matches_the_api(page, url):
    request = run_preset(page, 0)
    posts = compress_posts(page)
    for ratio in (0.05, 0.2, 1 / 3, 0.5, 0.8, 1.0):
        page.fill("#ratio-value", repr(ratio))
        assert page.is_checked("#mode-ratio")
        assert_matches(page, api(url, request, keep_ratio=ratio))
    page.focus("#ratio")
    page.keyboard.press("ArrowRight")  # the slider itself: 0.8 snaps to a step, then one step up
    ratio = float(page.input_value("#ratio-value"))
    assert_matches(page, api(url, request, keep_ratio=ratio))
    assert compress_posts(page) == posts


def test_rerank_order_and_copied_context_match_reorder(page, url):
    request = run_preset(page, 0)
    page.fill("#threshold-value", "0.2")
    expected = api(url, request, threshold=0.2, reorder=True)
    order = [p["index"] for p in expected["passages"]]
    rendered = page.eval_on_selector_all("#passage-list > li", "items => items.map(li => Number(li.id.split('-')[1]))")
    assert rendered == order
    assert page.inner_text("#passage-list > li:first-child .rank") == "#1"
    context = "\n\n".join(p["pruned_text"] for p in expected["passages"] if p["pruned_text"])
    assert page.input_value("#context") == context
    page.click("#copy")
    assert page.evaluate("navigator.clipboard.readText()") == context
    page.uncheck("#reorder")  # input order
    rendered = page.eval_on_selector_all("#passage-list > li", "items => items.map(li => Number(li.id.split('-')[1]))")
    assert rendered == sorted(order)


def test_pasted_unicode_passages_keep_code_point_offsets(page, url):
    page.fill("#question", "Where does sushi come from?")
    page.fill("#passages", UNICODE_PASSAGES)
    request = submit(page)
    assert [p["title"] for p in request["passages"]] == ["Snacks 🍕", None]
    assert_matches(page, api(url, request))
    for ratio in (0.3, 0.7):
        page.fill("#ratio-value", str(ratio))
        assert_matches(page, api(url, request, keep_ratio=ratio))
    assert "Pizza 🍕 was first made in Naples." in page.inner_text("#passage-0")


def test_bad_input_shows_the_servers_message(page):
    page.fill("#question", "   ")
    page.fill("#passages", "Some passage.")
    page.click("#run")
    page.wait_for_selector("#error:not(:empty)")
    assert page.text_content("#error") == "422: question is empty"
    page.fill("#question", "q")
    page.fill("#passages", "\n\n  \n")
    page.click("#run")
    assert "passages: add at least one passage" in page.text_content("#error")


def test_keyboard_focus_shows_the_score_and_regions_are_announced(page):
    run_preset(page, 2)
    page.mouse.move(0, 0)  # nothing hovered: only focus can show the tooltip
    page.focus("#question")
    for _ in range(40):  # tab forward from the form until a sentence has focus
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('s')"):
            break
    tip = page.evaluate("getComputedStyle(document.activeElement, '::after').content")
    title = page.evaluate("document.activeElement.title")
    assert title.startswith("score ") and tip == json.dumps(title, ensure_ascii=False)
    page.keyboard.press("Tab")  # the tooltip follows focus
    assert page.evaluate("getComputedStyle(document.querySelector('.s'), '::after').content") == "none"
    for region in ("#summary", "#preset-credit", "#copy-status"):
        assert page.get_attribute(region, "aria-live") == "polite"
    assert page.get_attribute("#error", "role") == "alert"
    unlabeled = page.evaluate("""[...document.querySelectorAll('input, select, textarea')].filter(e =>
        !e.labels?.length && !e.getAttribute('aria-label')).map(e => e.id)""")
    assert unlabeled == []


def test_narrow_screen_has_no_horizontal_scroll(browser, url, artefacts):
    context = browser.new_context(viewport={"width": 360, "height": 800}, is_mobile=True)
    page = context.new_page()
    page.goto(url + "/")
    page.wait_for_selector("body[data-ready=true]")
    run_preset(page, 0)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(artefacts / "playground-narrow.png"), full_page=True)
    context.close()


def test_bearer_token_is_asked_for_kept_in_session_storage_and_sent(browser, default_compressor):
    with serve(default_compressor, api_key="s3cret", request_timeout_s=120) as (base, _):
        context = browser.new_context()
        page = context.new_page()
        page.goto(base + "/")
        page.wait_for_selector("body[data-ready=true]")
        assert page.is_visible("#token")
        page.select_option("#preset", "2")
        page.click("#run")
        page.wait_for_selector("#error:not(:empty)")
        assert page.text_content("#error").startswith("401: missing or wrong bearer token")
        page.fill("#token", "s3cret")
        assert page.evaluate("sessionStorage.getItem('thresher.token')") == "s3cret"
        submit(page)
        assert page.text_content("#error") == ""
        page.reload()
        page.wait_for_selector("body[data-ready=true]")
        assert page.input_value("#token") == "s3cret"
        context.close()
