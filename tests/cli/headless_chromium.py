"""Loads a page in headless Chromium over the DevTools protocol (on a pipe: no npm, no network
port) and reports what a user would see: console messages, page errors, the DOM (through
JavaScript evaluated in the page) and a screenshot.

Debian's `chromium`, run as the tests run it: as root, so --no-sandbox, with a fresh profile
that is removed afterwards, and with everything that would reach the network switched off.
"""
import base64
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium")


class ChromiumError(RuntimeError):
    pass


def _above(fd, lowest):
    """fd duplicated to a number >= lowest (the original closed)."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, lowest)
    os.close(fd)
    return moved


class Page:
    """One browser with one page; use as a context manager."""

    def __init__(self, width=1400, height=1000, timeout=60):
        if CHROMIUM is None:
            raise ChromiumError("chromium was not found (apt-get install chromium)")
        self.timeout = timeout
        self.console = []   # "level: text" of console messages, exceptions and log entries
        self._profile = tempfile.mkdtemp(prefix="ranktime-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The browser's ends, moved above 3 and 4 so that placing them there clobbers nothing.
        to_browser_r, from_browser_w = (_above(fd, 10) for fd in (to_browser_r, from_browser_w))
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-default-apps", "--disable-breakpad",
                "--mute-audio", "--remote-debugging-pipe", f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}", "about:blank"]
        # The DevTools pipe is fds 3 (commands in) and 4 (replies out) of the browser; bash moves
        # them there (dash takes one-digit fds only). Its stderr goes to a file: a full pipe would
        # stall it.
        self._stderr = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            ["/bin/bash", "-c", f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w} '
                           f'{to_browser_r}<&- {from_browser_w}>&-',
             CHROMIUM, *args],
            pass_fds=(to_browser_r, from_browser_w), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self._stderr, start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events = []
        self._session = None
        try:
            targets = self._call("Target.getTargets")["targetInfos"]
            page = next(t for t in targets if t["type"] == "page")
            self._session = self._call("Target.attachToTarget",
                                       {"targetId": page["targetId"], "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                self.call(f"{domain}.enable")
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        except BaseException:
            self.close()
            raise

    # --- protocol -------------------------------------------------------------------------

    def _send(self, message):
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._to_browser, data):]

    def _receive(self, deadline):
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChromiumError("no reply from chromium in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise ChromiumError("chromium exited: " + self._stderr_tail())
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message = json.loads(raw)
        if "method" in message:
            self._on_event(message)
        return message

    def _on_event(self, message):
        method, params = message["method"], message.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            self.console.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.console.append("exception: " + details.get("exception", {}).get(
                "description", details.get("text", "")))
        elif method == "Log.entryAdded":
            entry = params["entry"]
            self.console.append(f"log.{entry['level']}: {entry['text']}")
        self._events.append(message)

    def _call(self, method, params=None, session=None):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._send(message)
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise ChromiumError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def call(self, method, params=None):
        return self._call(method, params, self._session)

    def _stderr_tail(self):
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-2000:]

    # --- what tests use -------------------------------------------------------------------

    def open(self, url, ready_expression="document.readyState === 'complete'"):
        """Navigates and waits for the load event, then until ready_expression is true."""
        self._events.clear()
        self.call("Page.navigate", {"url": url})
        deadline = time.monotonic() + self.timeout
        while not any(e["method"] == "Page.loadEventFired" for e in self._events):
            self._receive(deadline)
        while not self.evaluate(ready_expression):
            if time.monotonic() > deadline:
                raise ChromiumError(f"page not ready: {ready_expression}; console: {self.console}")
            time.sleep(0.05)

    def evaluate(self, expression):
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise ChromiumError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path, full_page=True):
        params = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                              "scale": 1}
        data = self.call("Page.captureScreenshot", params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        if self._process.poll() is None:
            try:
                self._call("Browser.close")
            except (ChromiumError, OSError):
                pass
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        try:  # the browser's own process group: helpers it left, if any
            os.killpg(self._process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self._stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
