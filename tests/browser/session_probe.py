"""Not collected on its own (no ``test_`` prefix): tests/browser/test_browser_fixture.py runs it in a pytest session
of its own, to see what the session leaves running once it ends.

The test opens a page in the session's chromium, says so on stdout, and waits for a line on stdin
before it ends (the session then tears the browser down), unless the outer test kills it first.
"""

from __future__ import annotations

import sys

from tests.browser.support import BROWSER_MARKS

pytestmark = BROWSER_MARKS


def test_a_page_is_open_until_told_to_end(chromium):
    page = chromium.new_page()
    page.set_content("<p id=up>up</p>")
    assert page.inner_text("#up") == "up"
    print("chromium up", flush=True)
    sys.stdin.readline()
