"""The standard output of a job's launcher, passed on to ours line by line.

The launcher writes what its ranks print (rank 0's summary, a ``--json`` object); passed on
through a pipe of ours rather than our stdout itself:

* MPICH's banner for a rank that died (``BAD TERMINATION OF ONE OF YOUR APPLICATION
  PROCESSES``, and the lines after it) is left out: it came before a ``--json`` object on
  stdout, which was then no JSON, and the rank's end is said on stderr in tiledsl's words;
* a stdout that cannot be written (``> /dev/full``, a full disk) is said once, in one line, as
  one rank says it, where the launcher printed its own errors and the job was blamed on a rank;
* a reader that has gone (``| head``) ends the passing on, quietly; what comes after is read
  and dropped, so that no rank waits on a full pipe;
* with ``--json``, rank 0's object (a summary or a failure) is passed on last, on a line of its
  own: the launcher merges the ranks' output as it comes, and a kernel's print on another rank
  (one without its newline, whose end came later) could land on its line or after it, where a
  script reads stdout's last line;
* a line behind :data:`STDERR_MARK` goes to stderr: rank 0's errors after its summary come on
  stdout so marked (the job's launcher passes a rank's two streams on apart, and an error the
  summary said was "below" it came above it).
"""
from __future__ import annotations

import contextlib
import os
import re
import threading

#: MPICH's banner for a rank that died, line by line: the rule above and below it, its '=   ' lines, and
#: the three lines hydra adds after it
_BANNER = re.compile(rb"^(=+|=   .*|YOUR APPLICATION TERMINATED WITH THE EXIT STRING: .*"
                     rb"|This typically refers to a problem with your application\.|Please see the FAQ page for "
                     rb"debugging suggestions)\r?\n?$")
JOIN_SECONDS = 5.0  # how long the end of the output may take once the launcher has ended
#: how rank 0's --json object begins (runtime.reporting's summary_json and failure_json both open so)
RESULT_OPENING = b'{"program": '
#: the mark of a line for stderr (as runtime.world's STDERR_MARK)
STDERR_MARK = b"\x1etiledsl-stderr\x1f"


class Forwarder:
    """Passes the lines of ``source`` (a pipe's reading end, binary) on to file descriptor ``target``
    on a thread of its own, from :meth:`start` until the pipe closes (:meth:`finish`)."""

    def __init__(self, source, target: int, json_last: bool = False, error_target: int = 2):
        self.source, self.target, self.json_last, self.error_target = source, target, json_last, error_target
        self._result = b""  # with json_last: rank 0's object, passed on at the end
        self._line_open = False  # what was passed on last ends mid-line
        self.failure: OSError | None = None  # why stdout could not be written, if it could not
        self.reader_gone = False  # a broken pipe: the reader of our stdout left
        self._held = b""  # a blank line, which the banner begins with: passed on with the next line unless that is it
        self._thread = threading.Thread(target=self._forward, name="job-output", daemon=True)

    def start(self) -> "Forwarder":
        self._thread.start()
        return self

    def finish(self) -> None:
        """Wait for the end of the output (processes a kernel left may hold the pipe: not for ever)."""
        self._thread.join(JOIN_SECONDS)

    def _forward(self) -> None:
        with self.source:
            for line in self.source:
                at = line.find(STDERR_MARK)
                if at >= 0:  # what a kernel printed before it without its newline stays on stdout
                    self._write(self._held + line[:at] + b"\n" * bool(line[:at]))
                    self._held = b""
                    with contextlib.suppress(OSError):  # a stderr gone: dropped
                        _write_all(self.error_target, line[at + len(STDERR_MARK):])
                    continue
                if _BANNER.match(line):
                    self._held = b""
                    continue
                if line.strip() == b"" and not self._held:
                    self._held = line
                    continue
                self._write(self._held + self._kept_result(line))
                self._held = b""
        self._write(self._held)
        if self._result:
            self._write(b"\n" * self._line_open + self._result)

    def _kept_result(self, line: bytes) -> bytes:
        """``line`` less rank 0's ``--json`` object, which is kept for the end (``json_last``), and
        with the newline that ends what a kernel printed before it on that line."""
        at = line.find(RESULT_OPENING) if self.json_last else -1
        if at < 0 or not line.rstrip().endswith(b"}"):
            return line
        self._result = line[at:]
        return line[:at] + b"\n" * bool(line[:at])

    def _write(self, data: bytes) -> None:
        if self.failure is not None or self.reader_gone:
            return  # read and dropped
        if data:
            self._line_open = not data.endswith(b"\n")
        try:
            _write_all(self.target, data)
        except BrokenPipeError:
            self.reader_gone = True
        except OSError as error:
            self.failure = error


def _write_all(target: int, data: bytes) -> None:
    """``data`` written whole to file descriptor ``target`` (a pipe may take it in parts)."""
    view = memoryview(data)
    while view:
        view = view[os.write(target, view):]
