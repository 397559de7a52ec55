"""The real ``slipway`` command in a subprocess, its output readable line by line with a deadline."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 30.0


class Command:
    """``python -m slipway …`` with its stdout read line by line on a thread (readable with a deadline)."""

    def __init__(self, *args: str, config: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLIPWAY_")}
        env.update(XDG_CONFIG_HOME=str(config), PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen([sys.executable, "-m", "slipway", *args], cwd=REPO, env=env, text=True,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def line_matching(self, pattern: str) -> re.Match:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found
        self.process.kill()
        raise AssertionError(f"no line matching {pattern!r} in {self.seen}; stderr: {self.process.stderr.read()}")

    def finish(self) -> tuple[int, str, str]:
        """Exit code, the rest of stdout, stderr (killed past the deadline)."""
        try:
            code = self.process.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        rest = []
        while not self.lines.empty():
            rest.append(self.lines.get())
        return code, "\n".join(rest), self.process.stderr.read()
