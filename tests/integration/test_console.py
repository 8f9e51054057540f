"""The web console at / (SPEC section 11) in a real browser: headless
Chromium driven by chromedriver through selenium, against the real daemon
(with a token) and real ipykernels.

What a user checks: the page and its files come from the daemon with a
strict Content-Security-Policy; a wrong token is refused on the login form;
the token is kept in sessionStorage and never appears in a URL; contexts
are created, listed, restarted, interrupted and deleted from the page; a
code cell streams stdout as it comes and shows rich outputs (a result, PNG,
SVG as an image, JSON, a traceback in colour); kernel HTML runs in a
sandboxed frame that can reach neither the console nor the daemon; the
process list follows a run's log live.

Every process here is started by the test (the daemon, chromedriver and
Chromium with a private profile dir) and stopped in `finally`.

KB_SCREENSHOT_DIR=<dir> also saves the console's screenshots there
(docs/images/console-*.png were made so).
"""
import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from conftest import Daemon, error_of, pids_with_marker, wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WEB = Path(__file__).resolve().parents[2] / "web" / "console"

PAGE_TIMEOUT = 60.0  # a page condition (a kernel start or a run included)
STOP_TIMEOUT = 15.0  # chromedriver and Chromium gone after quit()
TITLE = "kernelbridge console"
TOKEN_KEY = "kernelbridge.token"


@pytest.fixture(scope="module")
def console_daemon():
    d = Daemon(token=uuid.uuid4().hex)
    yield d
    d.close()


# ---- The files and their headers -------------------------------------------


def csp_directives(header):
    """{directive: [sources]} of a Content-Security-Policy header."""
    out = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            out[words[0]] = words[1:]
    return out


def test_the_console_files_are_served_with_a_strict_policy(console_daemon):
    d = console_daemon
    files = {"/": "index.html", "/console/index.html": "index.html",
             "/console/main.js": "main.js", "/console/api.js": "api.js",
             "/console/ansi.js": "ansi.js", "/console/render.js": "render.js",
             "/console/console.css": "console.css"}
    types = {"html": "text/html", "js": "text/javascript", "css": "text/css"}
    for path, name in files.items():
        r = d.get(path, token="")  # the page itself is open: it holds no secret
        assert r.status == 200, (path, r)
        assert r.header("Content-Type").startswith(types[name.rsplit(".", 1)[1]]), r.headers
        # compiled in from web/console, byte for byte
        assert r.body == (WEB / name).read_bytes(), path
        assert r.header("X-Content-Type-Options") == "nosniff"
        assert r.header("Referrer-Policy") == "no-referrer"
        assert r.header("Cache-Control") == "no-cache"
        csp = csp_directives(r.header("Content-Security-Policy"))
        assert csp["default-src"] == ["'none'"], csp
        assert csp["script-src"] == ["'self'"], csp
        assert csp["style-src"] == ["'self'"], csp
        assert csp["connect-src"] == ["'self'"], csp
        assert csp["frame-src"] == ["'self'"], csp
        assert csp["frame-ancestors"] == ["'none'"], csp
        assert csp["base-uri"] == ["'none'"] and csp["form-action"] == ["'none'"], csp
        assert csp["require-trusted-types-for"] == ["'script'"], csp
        assert csp["trusted-types"] == ["'none'"], csp
        assert "unsafe" not in r.header("Content-Security-Policy")

    # the frame of kernel HTML: its own policy, sandboxed, no network
    r = d.get("/console/frame.html", token="")
    assert r.status == 200 and r.body == (WEB / "frame.html").read_bytes()
    csp = csp_directives(r.header("Content-Security-Policy"))
    assert csp["sandbox"] == ["allow-scripts"], csp
    assert csp["connect-src"] == ["'none'"], csp
    assert csp["default-src"] == ["'none'"], csp
    assert csp["frame-ancestors"] == ["'self'"], csp
    assert csp["form-action"] == ["'none'"], csp
    assert r.header("X-Content-Type-Options") == "nosniff"

    # the page loads nothing from elsewhere, and no inline script or style
    html = (WEB / "index.html").read_text()
    assert "<script>" not in html and "style=" not in html and "<style" not in html
    for needle in ('src="', 'href="'):
        for piece in html.split(needle)[1:]:
            url = piece.split('"', 1)[0]
            assert url.startswith("/console/") or url.startswith("data:"), url

    # an unknown file is our JSON 404; other methods are refused
    error_of(d.get("/console/nope.js", token=""), 404, "NOT_FOUND")
    error_of(d.get("/console/", token=""), 404, "NOT_FOUND")
    error_of(d.get("/console/sub/main.js", token=""), 404, "NOT_FOUND")
    r = d.post("/", {}, token="")
    error_of(r, 405, "METHOD_NOT_ALLOWED")
    assert r.header("Allow") == "GET, HEAD"
    r = d.request("HEAD", "/console/main.js", token="")
    assert r.status == 200 and r.body == b""
    # the API the page calls still needs the token
    error_of(d.get("/contexts", token=""), 401, "UNAUTHORIZED")


# ---- The browser --------------------------------------------------------------


class Browser:
    """Headless Chromium at the console, with the helpers the tests share."""

    def __init__(self, d, tmp_path):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.d = d
        self.dir = tmp_path / "browser"  # the profile and chromedriver's log
        self.dir.mkdir()
        self.driver = None
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                    "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                    "--disable-extensions", "--user-data-dir=" + str(self.dir / "profile"),
                    "--window-size=1280,800", "--hide-scrollbars"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = Service(CHROMEDRIVER, log_path=str(self.dir / "chromedriver.log"))
        self.driver = webdriver.Chrome(service=service, options=options)
        # a viewport of exactly 1280x800, whatever the window's frame takes
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
        self.driver.set_page_load_timeout(PAGE_TIMEOUT)
        self.driver.set_script_timeout(30)
        self.console_log = []

    def quit(self):
        try:
            if self.driver is not None:
                self.driver.quit()
        finally:
            # chromedriver and Chromium have the browser dir in their
            # arguments (the log, the profile); what quit() left is killed
            if not wait_until(lambda: not pids_with_marker(str(self.dir)), STOP_TIMEOUT):
                for pid in pids_with_marker(str(self.dir)):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                raise AssertionError("chromedriver or Chromium outlived quit()")

    # -- reading the page

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def find(self, testid, within=None):
        from selenium.webdriver.common.by import By
        return (within or self.driver).find_element(By.CSS_SELECTOR, '[data-testid="%s"]' % testid)

    def logs(self):
        """The browser's console messages so far (each read once by selenium)."""
        try:
            self.console_log += [e["message"] for e in self.driver.get_log("browser")]
        except Exception:
            pass
        return self.console_log

    def state(self):
        """What the page shows, for a failure's message."""
        try:
            shown = self.js("""
                const t = (id) => { const e = document.querySelector('[data-testid="' + id + '"]');
                                    return e ? e.innerText.slice(0, 3000) : null; };
                return {login_error: t('login-error'), contexts: t('context-list'),
                        output: t('output'), processes: t('process-list'),
                        log: t('process-log'), info: t('daemon-info'), url: location.href};""")
        except Exception as e:  # the page itself may be what failed
            shown = repr(e)
        return "page: %s\nconsole: %s\ndaemon log: %s" % (
            json.dumps(shown, indent=1), self.logs()[-20:], self.d.log[-3000:])

    def wait(self, condition, what, timeout=PAGE_TIMEOUT):
        """condition() until it is truthy; its value."""
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait
        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.1).until(
                lambda _driver: condition())
        except TimeoutException:
            raise AssertionError("no %s in %ss\n%s" % (what, timeout, self.state()))

    def screenshot(self, name, top=None):
        """Save the viewport as name under $KB_SCREENSHOT_DIR, if set, with
        the element of testid top at the top (else the page's top)."""
        target = os.environ.get("KB_SCREENSHOT_DIR")
        if target:
            Path(target).mkdir(parents=True, exist_ok=True)
            self.js("document.activeElement && document.activeElement.blur();"
                    "const e = arguments[0] && document.querySelector("
                    "'[data-testid=\"' + arguments[0] + '\"]');"
                    "if (e) e.scrollIntoView(); else window.scrollTo(0, 0);", top)
            time.sleep(0.3)  # frames resized, images drawn
            path = Path(target) / name
            self.driver.save_screenshot(str(path))
            try:  # a palette of 256 colours: a third of the bytes
                from PIL import Image
                Image.open(path).convert("RGB").quantize(
                    colors=256, method=Image.Quantize.MEDIANCUT,
                    dither=Image.Dither.NONE).save(path, optimize=True)
            except ImportError:
                pass

    # -- doing what a user does

    def open(self):
        self.driver.get(self.d.url + "/")
        self.wait(lambda: self.find("token-input").is_displayed(), "login form")
        assert self.driver.title == TITLE

    def login(self, token):
        field = self.find("token-input")
        field.clear()
        field.send_keys(token)
        self.find("login-button").click()

    def logged_in(self):
        self.wait(lambda: self.find("context-list").is_displayed() and
                  self.js("return document.querySelector('#new-context-language').options.length > 0"),
                  "console after login")

    def context_row(self, context_id):
        return self.js("""return (() => {
            const tr = [...document.querySelectorAll('[data-testid="context-list"] tr')]
              .find((r) => r.dataset.contextId === arguments[0]);
            if (!tr) return null;
            const cell = (c) => tr.querySelector('.' + c).textContent;
            return {id: cell('ctx-id'), language: cell('ctx-language'), state: cell('ctx-state'),
                    generation: cell('ctx-generation'), memory: cell('ctx-memory'),
                    activity: cell('ctx-activity')};
        })()""", context_id)

    def click_in_row(self, testid, list_id, key, value):
        from selenium.webdriver.common.by import By
        rows = self.driver.find_elements(By.CSS_SELECTOR, '[data-testid="%s"] tr' % list_id)
        for row in rows:
            if row.get_attribute(key) == value:
                row.find_element(By.CSS_SELECTOR, '[data-testid="%s"]' % testid).click()
                return
        raise AssertionError("no row %s=%s in %s\n%s" % (key, value, list_id, self.state()))

    def create_context(self, language="python"):
        from selenium.webdriver.support.ui import Select
        Select(self.find("new-context-language")).select_by_value(language)
        before = set(self.js("return [...document.querySelectorAll("
                             "'[data-testid=\"context-row\"]')].map((r) => r.dataset.contextId)"))
        self.find("new-context-button").click()
        # the new context is selected for the code cell once it is created
        context_id = self.wait(lambda: (lambda v: v if v and v not in before else None)(
            self.js("return document.querySelector('[data-testid=\"cell-context\"]').value")),
            "new context")
        self.wait(lambda: (self.context_row(context_id) or {}).get("state") == "idle",
                  "idle row of %s" % context_id)
        return context_id

    def type_code(self, code):
        area = self.find("code-input")
        area.clear()
        area.send_keys(code)
        assert area.get_attribute("value") == code

    def run(self, code):
        """Type code, click Run; returns the time of the click."""
        self.type_code(code)
        self.find("run-button").click()
        return time.monotonic()

    def run_ended(self):
        return self.js("return !!document.querySelector('[data-testid=\"output\"] "
                       "[data-testid=\"run-end\"]')")

    def wait_run_end(self, timeout=PAGE_TIMEOUT):
        self.wait(self.run_ended, "end of the run", timeout)
        return self.js("return document.querySelector('[data-testid=\"output\"] "
                       "[data-testid=\"run-end\"]').dataset.reason")

    def output(self, selector, attr="textContent"):
        """attr of each element matching selector in the output."""
        return self.js("return [...document.querySelectorAll('[data-testid=\"output\"] ' + "
                       "arguments[0])].map((e) => e[arguments[1]])", selector, attr)


@pytest.fixture
def browser(console_daemon, tmp_path):
    b = None
    try:
        b = Browser(console_daemon, tmp_path)
        yield b
    finally:
        if b is not None:
            b.quit()


def assert_no_csp_violation_by_the_console(b):
    """The console itself never trips its own policy. (chromedriver reports
    the page's violations, as "Content Security Policy" or "TrustedHTML"
    messages, and not its frames': the frame's refusals of kernel HTML,
    connect-src 'none', are allowed should a later one report them.)"""
    for message in b.logs():
        if "Content Security Policy" in message or "Trusted" in message:
            assert "connect-src 'none'" in message, message


# ---- Login -----------------------------------------------------------------------


def test_login_keeps_the_token_in_session_storage_and_out_of_urls(browser):
    b, d = browser, browser.d
    b.open()
    b.login("not-the-token")
    error = b.wait(lambda: b.find("login-error").is_displayed() and b.find("login-error").text,
                   "login error")
    b.screenshot("console-login.png")
    assert "401" in error and "token" in error.lower(), error
    assert not b.find("context-list").is_displayed()
    assert b.js("return sessionStorage.getItem(arguments[0])", TOKEN_KEY) is None

    b.login(d.token)
    b.logged_in()
    assert not b.find("login-error").is_displayed()
    assert b.js("return sessionStorage.getItem(arguments[0])", TOKEN_KEY) == d.token
    # kept nowhere else, and in no URL the page loaded or called
    assert b.js("return localStorage.length") == 0
    assert b.js("return document.cookie") == ""
    assert d.token not in b.js("return location.href")
    b.wait(lambda: b.find("daemon-info").text.startswith("sb_"), "daemon info")
    urls = b.js("return performance.getEntries().map((e) => e.name)")
    assert any("/contexts" in u for u in urls), urls  # the page did call the API
    assert all(d.token not in u for u in urls), urls
    assert d.token not in d.log  # nor in the daemon's request log
    # the pool and the kernelspecs are shown
    b.wait(lambda: "python" in b.find("pool").text, "pool")
    assert "python3" in b.find("kernelspecs").text

    # a reload of the tab logs in again from sessionStorage
    b.driver.refresh()
    b.logged_in()
    b.find("logout-button").click()
    b.wait(lambda: b.find("token-input").is_displayed(), "login form after logout")
    assert b.js("return sessionStorage.getItem(arguments[0])", TOKEN_KEY) is None
    assert_no_csp_violation_by_the_console(b)


def test_a_daemon_without_a_token_takes_an_empty_one(daemon, tmp_path):
    b = Browser(daemon, tmp_path)
    try:
        b.open()
        b.login("")
        b.logged_in()
        assert b.js("return sessionStorage.getItem(arguments[0])", TOKEN_KEY) == ""
        b.run("print('no token')")
        assert b.wait_run_end() == "exited"
        assert b.output("pre.out-stdout") == ["no token\n"]
        assert_no_csp_violation_by_the_console(b)
        # the policy is in force: no string becomes markup in the console
        assert b.js("try { document.createElement('div').innerHTML = '<b>x</b>'; return 'set'; }"
                    " catch (e) { return e.name; }") == "TypeError"
        assert any("TrustedHTML" in m for m in b.logs()), b.logs()  # and it is reported
    finally:
        b.quit()


# ---- Runs and outputs ---------------------------------------------------------------

STREAMING = """import sys, time
for i in range(4):
    print("tick", i, flush=True)
    time.sleep(0.8)
print("to stderr", file=sys.stderr)"""

RICH = """import base64, io, json
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from IPython.display import JSON, SVG, Image, display
fig, ax = plt.subplots(figsize=(3, 2), dpi=60)
ax.plot([1, 3, 2])
buf = io.BytesIO()
fig.savefig(buf, format="png")
display(Image(data=buf.getvalue(), format="png"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="60" height="40"><rect width="60" height="40" fill="#2457c5"/></svg>'))
display(JSON({"answer": 42, "list": [1, 2]}))
6 * 7"""

FAILING = """def f():
    return 1 / 0
f()"""

# Kernel HTML that tries to reach the console and the daemon, and writes
# what happened into its own document.
HOSTILE = """from IPython.display import HTML, display
display(HTML('''<p id="report">not run</p><script>
var r = ["ran"];
document.addEventListener("securitypolicyviolation", function (e) {
  r.push("csp:" + e.effectiveDirective); show(); });
function show() { document.getElementById("report").textContent = r.join(" "); }
try { parent.document.title = "pwned"; r.push("title:set"); } catch (e) { r.push("title:" + e.name); }
try { r.push("storage:" + sessionStorage.getItem("kernelbridge.token")); } catch (e) { r.push("storage:" + e.name); }
try { r.push("parent:" + parent.sessionStorage.getItem("kernelbridge.token")); } catch (e) { r.push("parent:" + e.name); }
r.push("origin:" + self.origin);
fetch("/contexts").then(function () { r.push("fetch:ok"); show(); },
                        function (e) { r.push("fetch:" + e.name); show(); });
show();
</script>'''))"""


def test_a_code_cell_streams_and_renders_rich_outputs(browser):
    b, d = browser, browser.d
    b.open()
    b.login(d.token)
    b.logged_in()
    context_id = b.create_context("python")
    row = b.context_row(context_id)
    assert row["language"] == "python" and row["generation"] == "1", row
    assert row["memory"].endswith("iB"), row  # the kernel's memory, measured
    assert context_id in [c["context_id"] for c in d.ok("GET", "/contexts")["contexts"]]

    # stdout as it comes: the first line is shown while the run goes on
    b.run(STREAMING)
    b.wait(lambda: "tick 0" in "".join(b.output("pre.out-stdout")), "first streamed line", 20)
    assert not b.run_ended(), "the first line came only with the end of the run"
    assert "tick 3" not in "".join(b.output("pre.out-stdout"))
    assert b.wait_run_end() == "exited"
    assert "".join(b.output("pre.out-stdout")) == "".join("tick %d\n" % i for i in range(4))
    assert b.output("pre.out-stderr") == ["to stderr\n"]
    head = b.output(".run-head")[0]
    assert context_id in head and "prc_" in head, head

    # rich outputs: PNG and SVG as images, JSON as text, the result
    b.run(RICH)
    assert b.wait_run_end() == "exited"
    png = b.output("img.out-png", "src")
    assert len(png) == 1 and png[0].startswith("data:image/png;base64,iVBOR"), png[:1]
    svg = b.output("img.out-svg", "src")
    assert len(svg) == 1 and svg[0].startswith("data:image/svg+xml"), svg
    b.wait(lambda: all(w > 0 for w in b.output("img", "naturalWidth")), "decoded images")
    assert b.output("img.out-svg", "naturalWidth") == [60]
    # no SVG markup in the page itself: the SVG is an image
    assert b.js("return document.querySelectorAll('svg').length") == 0
    assert [json.loads(t) for t in b.output("pre.out-json")] == [{"answer": 42, "list": [1, 2]}]
    assert b.output("pre.out-result") == ["42"]

    # a traceback: its ANSI colours as coloured spans, no escape left
    b.run(FAILING)
    assert b.wait_run_end() == "exited"
    text = b.output("pre.out-error")
    assert len(text) == 1 and "ZeroDivisionError" in text[0] and "\x1b" not in text[0], text
    spans = b.js("""
        const pre = document.querySelector('[data-testid="output"] pre.out-error');
        const base = getComputedStyle(pre).color;
        return [...pre.querySelectorAll('span.ansi')].map((s) => ({
            cls: s.className, text: s.textContent, coloured: getComputedStyle(s).color !== base}));""")
    assert spans, "no coloured span"
    assert any("ansi-fg-1" in s["cls"] and "ZeroDivisionError" in s["text"] and s["coloured"]
               for s in spans), spans
    assert all(s["coloured"] for s in spans if "ansi-fg-" in s["cls"]), spans
    assert "division by zero" in text[0] and "return 1 / 0" in text[0], text[0]

    # kernel HTML: in a sandboxed frame, whose scripts run but reach
    # neither the console (title, storage) nor the daemon (fetch)
    b.run(HOSTILE)
    assert b.wait_run_end() == "exited"
    frames = b.js("""return [...document.querySelectorAll('iframe')].map((f) => ({
        sandbox: [...f.sandbox], src: f.getAttribute('src'), srcdoc: f.hasAttribute('srcdoc'),
        cls: f.className}))""")
    assert len(frames) == 1, frames
    assert frames[0]["sandbox"] == ["allow-scripts"], frames  # no allow-same-origin
    assert frames[0]["src"] == "/console/frame.html" and not frames[0]["srcdoc"], frames
    frame = b.driver.find_element("css selector", "[data-testid=output] iframe")
    b.driver.switch_to.frame(frame)
    try:
        report = b.wait(lambda: (lambda t: t if "fetch:" in t and "csp:" in t else None)(
            b.js("var p = document.getElementById('report'); return p ? p.textContent : ''")),
            "the frame's report", 20)
        frame_origin = b.js("return self.origin")
    finally:
        b.driver.switch_to.default_content()
    words = report.split()
    assert "ran" in words, report
    assert "title:SecurityError" in words, report
    assert "storage:SecurityError" in words, report
    assert "parent:SecurityError" in words, report
    assert "origin:null" in words and frame_origin == "null", report
    assert "fetch:TypeError" in words and "csp:connect-src" in words, report
    assert b.driver.title == TITLE
    assert b.js("return sessionStorage.getItem(arguments[0])", TOKEN_KEY) == d.token
    assert b.js("return document.getElementById('report')") is None  # not in the console's DOM
    b.screenshot("console-html-sandbox.png", top="cell")

    # the screenshot of a run with a bit of everything
    b.run('print("hello from the console")\n' + RICH.replace("6 * 7", "1 / 0"))
    b.wait_run_end()
    b.screenshot("console-run.png", top="cell")
    assert_no_csp_violation_by_the_console(b)


# ---- Contexts: restart, interrupt, delete ----------------------------------------------


def test_restart_interrupt_and_delete_a_context(browser):
    b, d = browser, browser.d
    b.open()
    b.login(d.token)
    b.logged_in()
    context_id = b.create_context("python")

    b.run("x = 5\nprint(x)")
    assert b.wait_run_end() == "exited"
    assert b.output("pre.out-stdout") == ["5\n"]

    # restart: a fresh kernel, the next generation, the state gone
    b.click_in_row("context-restart", "context-list", "data-context-id", context_id)
    b.wait(lambda: (b.context_row(context_id) or {}).get("generation") == "2",
           "generation 2 after restart")
    assert d.ok("GET", "/contexts/" + context_id)["generation"] == 2
    b.wait(lambda: (b.context_row(context_id) or {}).get("state") == "idle", "idle after restart")
    b.run("print('x' in globals())")
    assert b.wait_run_end() == "exited"
    assert b.output("pre.out-stdout") == ["False\n"]

    # interrupt: a long sleep ends promptly with KeyboardInterrupt
    b.run("import time\nprint('sleeping', flush=True)\ntime.sleep(30)")
    b.wait(lambda: b.output("pre.out-stdout") == ["sleeping\n"], "the sleep under way", 20)
    b.wait(lambda: (b.context_row(context_id) or {}).get("state") == "busy", "busy context", 10)
    clicked = time.monotonic()
    b.click_in_row("context-interrupt", "context-list", "data-context-id", context_id)
    reason = b.wait_run_end(timeout=15)
    took = time.monotonic() - clicked
    assert took < 10, took
    errors = b.output("pre.out-error")
    assert len(errors) == 1 and "KeyboardInterrupt" in errors[0], (reason, errors)
    b.wait(lambda: (b.context_row(context_id) or {}).get("state") == "idle", "idle after interrupt")
    b.run("print('still here')")
    assert b.wait_run_end() == "exited"
    assert b.output("pre.out-stdout") == ["still here\n"]

    # delete: gone from the page and from the daemon
    b.click_in_row("context-delete", "context-list", "data-context-id", context_id)
    b.wait(lambda: b.context_row(context_id) is None, "row gone after delete")
    error_of(d.get("/contexts/" + context_id), 404, "SESSION_NOT_FOUND")
    assert b.js("return document.querySelector('[data-testid=\"cell-context\"]').value") == ""
    assert not b.find("context-error").is_displayed(), b.find("context-error").text
    assert_no_csp_violation_by_the_console(b)


# ---- Processes and their live logs -------------------------------------------------------

SLOW_LOG = """import time
for i in range(8):
    print("line", i, flush=True)
    time.sleep(0.6)"""


def test_the_process_list_follows_a_log_live(browser):
    b, d = browser, browser.d
    b.open()
    b.login(d.token)
    b.logged_in()
    b.run(SLOW_LOG)  # in the default python context
    process_id = b.wait(lambda: (lambda h: h[0].split()[0] if h and h[0].startswith("prc_")
                                 else None)(b.output(".run-head")), "the run's process id", 30)
    b.wait(lambda: b.js("""return [...document.querySelectorAll(
        '[data-testid="process-list"] tr')].some((r) => r.dataset.processId === arguments[0]
        && r.dataset.state === 'running')""", process_id), "running process row", 10)
    b.click_in_row("process-log-button", "process-list", "data-process-id", process_id)

    def log():
        return b.js("""const p = document.querySelector('[data-testid="process-log"]');
                       return {id: p.dataset.processId, state: p.dataset.state,
                               text: p.textContent};""")

    # a line shows in the log while the run still goes on: followed live
    first = b.wait(lambda: (lambda l: l if "line 0" in l["text"] else None)(log()),
                   "first log line", 10)
    assert first["id"] == process_id
    assert first["state"] == "following" and "line 7" not in first["text"], first
    assert not b.run_ended()
    ended = b.wait(lambda: (lambda l: l if l["state"] == "ended" else None)(log()),
                   "end of the log", 30)
    assert ended["text"] == "".join("line %d\n" % i for i in range(8)), ended
    assert b.wait_run_end() == "exited"
    b.wait(lambda: b.js("""return [...document.querySelectorAll(
        '[data-testid="process-list"] tr')].some((r) => r.dataset.processId === arguments[0]
        && r.dataset.state === 'terminal')""", process_id), "terminal process row", 10)
    assert d.ok("GET", "/processes/" + process_id)["state"] == "terminal"
    b.screenshot("console-processes.png")
    assert_no_csp_violation_by_the_console(b)


# ---- Forks and checkpoints (SPEC section 13) ---------------------------------------------


def checkpoint_ids(b):
    return b.js("return [...document.querySelectorAll('[data-testid=\"checkpoint-row\"]')]"
                ".map((r) => r.dataset.checkpointId)")


def cell_context(b):
    return b.js("return document.querySelector('[data-testid=\"cell-context\"]').value")


def test_fork_a_context_and_restore_its_checkpoints(browser):
    b, d = browser, browser.d
    b.open()
    b.login(d.token)
    b.logged_in()
    parent = b.create_context("python")
    assert b.find("checkpoint-title").text == "of " + parent
    assert checkpoint_ids(b) == []
    b.run("x = 1")
    assert b.wait_run_end() == "exited"

    # a checkpoint made from the page is the daemon's
    b.find("checkpoint-button").click()
    b.wait(lambda: len(checkpoint_ids(b)) == 1, "a checkpoint row")
    (cp,) = checkpoint_ids(b)
    listed = d.ok("GET", "/contexts/%s/checkpoints" % parent)["checkpoints"]
    assert [c["checkpoint_id"] for c in listed] == [cp] and cp.startswith("cp_")
    assert cp in b.find("checkpoint-status").text
    row = b.js("const r = document.querySelector('[data-checkpoint-id=\"' + arguments[0] + '\"]');"
               "return [r.querySelector('.cp-count').textContent, r.querySelector('.cp-memory').textContent]",
               cp)
    assert row[0] == "1" and row[1].endswith("iB"), row

    # restore: the state from before, the next generation, the checkpoint kept
    b.run("x = 2")
    assert b.wait_run_end() == "exited"
    b.click_in_row("checkpoint-restore", "checkpoint-list", "data-checkpoint-id", cp)
    b.wait(lambda: (b.context_row(parent) or {}).get("generation") == "2", "generation 2 after restore")
    ctx = d.ok("GET", "/contexts/" + parent)
    assert ctx["restored_from"] == {"checkpoint_id": cp, "execution_count": 1}
    assert "generation 2" in b.find("checkpoint-status").text
    b.wait(lambda: (b.context_row(parent) or {}).get("state") == "idle", "idle after restore")
    b.run("print(x)")
    assert b.wait_run_end() == "exited"
    assert b.output("pre.out-stdout") == ["1\n"]
    assert checkpoint_ids(b) == [cp]

    # Fork: a new context holding the parent's state, selected for the cell
    b.click_in_row("context-fork", "context-list", "data-context-id", parent)
    child = b.wait(lambda: (lambda v: v if v not in ("", parent) else None)(cell_context(b)),
                   "the fork selected")
    assert d.ok("GET", "/contexts/" + child)["forked_from"]["context_id"] == parent
    b.wait(lambda: (b.context_row(child) or {}).get("state") == "idle", "idle fork row")
    assert b.js("return [...document.querySelectorAll('[data-testid=\"context-row\"]')]"
                ".find((r) => r.dataset.contextId === arguments[0]).dataset.forkedFrom", child) == parent
    assert b.find("checkpoint-title").text == "of " + child
    b.wait(lambda: checkpoint_ids(b) == [], "the fork's own (empty) checkpoint list")
    b.run("print(x + 40)")
    assert b.wait_run_end() == "exited"
    assert b.output("pre.out-stdout") == ["41\n"]

    # back to the parent: its checkpoint is listed again, and deleted from the page
    b.click_in_row("context-use", "context-list", "data-context-id", parent)
    b.wait(lambda: checkpoint_ids(b) == [cp], "the parent's checkpoint again")
    b.screenshot("console-fork.png", "context-list")
    b.click_in_row("checkpoint-delete", "checkpoint-list", "data-checkpoint-id", cp)
    b.wait(lambda: checkpoint_ids(b) == [], "checkpoint row gone after delete")
    assert d.ok("GET", "/contexts/%s/checkpoints" % parent) == {"checkpoints": []}
    assert not b.find("checkpoint-error").is_displayed(), b.find("checkpoint-error").text
    assert not b.find("context-error").is_displayed(), b.find("context-error").text

    # the default cell has no checkpoints; a kernel that cannot fork shows no Fork
    b.click_in_row("context-use", "context-list", "data-context-id", child)
    b.js("const s = document.querySelector('[data-testid=\"cell-context\"]');"
         "s.value = ''; s.dispatchEvent(new Event('change'));")
    b.wait(lambda: not b.find("checkpoint-button").is_enabled(), "checkpoint button disabled")
    assert "pick a context" in b.find("checkpoint-title").text
    specs_shown = {line.split(" ")[0]: line for line in b.find("kernelspecs").text.splitlines()}
    assert specs_shown["python3"].endswith("· can fork"), specs_shown
    specs = {s["name"]: s for s in d.ok("GET", "/kernelspecs")["kernelspecs"]}
    if "bash" in specs and specs["bash"]["fork"] is False:
        d.ok("POST", "/contexts", {"language": "bash", "context_id": "console-bash"}, status=201)
        b.wait(lambda: b.context_row("console-bash") is not None, "bash row")
        hidden = b.js("const r = [...document.querySelectorAll('[data-testid=\"context-row\"]')]"
                      ".find((r) => r.dataset.contextId === 'console-bash');"
                      "return r.querySelector('[data-testid=\"context-fork\"]').hidden")
        assert hidden is True
        assert "can fork" not in specs_shown["bash"], specs_shown
        b.click_in_row("context-use", "context-list", "data-context-id", "console-bash")
        b.wait(lambda: "cannot fork" in b.find("checkpoint-title").text, "cannot-fork note")
        assert not b.find("checkpoint-button").is_enabled()
        assert d.delete("/contexts/console-bash").status == 204
    for cid in (child, parent):
        assert d.delete("/contexts/" + cid).status == 204
    assert_no_csp_violation_by_the_console(b)
