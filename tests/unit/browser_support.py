"""Headless Chromium for the tests of a page a person opens (the audit's ``report.html``).

A copy of the page gets a probe as its first script: it records every ``console.error``,
uncaught exception and element that failed to load, and once the page has loaded, every
image that did not decode and every link within the page to an id it does not hold; then it writes them into the DOM, which ``--dump-dom`` prints.
Chromium's own log (stderr) is no use for this: it mixes the page's messages with the
browser's (D-Bus, GPU) and changes between versions.

Chromium comes from ``tests.tools``: without it the tests skip saying how to install it;
under ``CI=true`` they fail.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

from tests import tools

RENDER_TIMEOUT_S = 60  # one page; a hung browser fails the test instead of stalling it
ERRORS_ID = "render-errors"
PROBE = """<script>
window.__renderErrors = [];
const recordRenderError = (what) => window.__renderErrors.push(String(what));
const consoleError = console.error;
console.error = (...args) => { recordRenderError("console.error: " + args.join(" ")); consoleError.apply(console, args); };
window.addEventListener("error", (e) => recordRenderError(
  e.target && e.target.tagName ? e.target.tagName + " did not load" : "uncaught: " + e.message), true);
window.addEventListener("unhandledrejection", (e) => recordRenderError("unhandled rejection: " + e.reason));
window.addEventListener("load", () => {
  for (const img of document.images) {
    if (!img.complete || img.naturalWidth === 0) recordRenderError("image not drawn: " + img.alt);
  }
  for (const link of document.querySelectorAll("a[href^='#']")) {
    const target = decodeURIComponent(link.getAttribute("href").slice(1));
    if (!document.getElementById(target)) recordRenderError("link to nothing: #" + target);
  }
  const out = document.createElement("pre");
  out.id = "ERRORS_ID";
  out.textContent = JSON.stringify(window.__renderErrors);
  document.body.appendChild(out);
});
</script>""".replace("ERRORS_ID", ERRORS_ID)


def render_errors(page: Path, scratch: Path) -> list[str]:
    """What went wrong rendering ``page`` in headless Chromium: console errors, uncaught
    exceptions, resources or images that failed, links to ids the page lacks; empty when it
    rendered cleanly."""
    text = page.read_text(encoding="utf-8")
    head = re.search(r"<head[^>]*>", text, re.IGNORECASE)
    assert head is not None, f"{page} has no <head>"
    probed = scratch / f"probed-{page.name}"
    probed.write_text(text[: head.end()] + PROBE + text[head.end() :], encoding="utf-8")
    done = subprocess.run(
        [
            tools.command("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={scratch / 'chromium-profile'}", "--virtual-time-budget=5000",
            "--dump-dom", probed.resolve().as_uri(),
        ],
        capture_output=True, text=True, timeout=RENDER_TIMEOUT_S, check=False,
    )  # fmt: skip
    found = re.search(rf'<pre id="{ERRORS_ID}">(.*?)</pre>', done.stdout, re.DOTALL)
    assert found is not None, (
        f"chromium exited {done.returncode} without the probe's result; stderr: {done.stderr[-2000:]}"
    )
    return list(json.loads(html.unescape(found.group(1))))
