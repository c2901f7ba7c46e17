"""This machine's tuned tile settings: the cache ``tiledsl tune`` writes and ``run`` reads.

One JSON file per machine, ``$XDG_CACHE_HOME/tiledsl/tune/<machine-key>.json``
(``~/.cache`` by default). The machine key names the hostname, the CPU model,
the core count and the NVIDIA GPUs the driver lists, so that a home directory
shared by several machines (a cluster's nodes) keeps one file per kind of node.
Inside, an entry per program (its name and what it calls: :func:`program_key`), GPU
backend and GPU count (:func:`entry_key`)
holds the tuned tile settings (``nb``, or ``B``/``b``/``s``), the program
parameters tuned with them (``params``: a QR's inner block ``ib``; absent from the
files of older versions, which stay readable), the host/GPU column ratio of
uniform tiles, and what tuning measured. :func:`nearest_ratio` turns host and GPU
speeds into such a ratio (for ``tune`` and for ``simulate``'s machine files).

Plain standard library: every rank reads it before a run. A file that cannot be
read or parsed is ignored with a one-line warning; writes are atomic (a
temporary file, then :func:`os.replace`).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import socket
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

from .. import usercache
from ..language import INT64_MAX, TILING_SETTINGS
from .rates import RateError, Rates
from .world import UsageError

VERSION = 1


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tiledsl/tune`` (``~/.cache/tiledsl/tune`` by default)."""
    return usercache.cache_dir("tune")


def machine() -> dict:
    """What identifies this machine for tuning: hostname, CPU model, cores, GPU names."""
    return {"hostname": socket.gethostname(), "cpu": _cpu_model(), "cores": os.cpu_count() or 1,
            "gpus": gpu_names()}


def machine_key(description: dict | None = None) -> str:
    """``<hostname>-<12 hex digits>``: readable, and different for any change of hardware."""
    description = machine() if description is None else description
    digest = hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:12]
    host = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(description.get("hostname") or "host"))[:40] or "host"
    return f"{host}-{digest}"


def cache_path() -> Path:
    """This machine's tuning file."""
    return cache_dir() / f"{machine_key()}.json"


def program_key(program) -> str:
    """The name a program's entries go by: its name and a digest of its tiling kind, the kernels it calls
    and its calls as written (``cholesky@5d1c09e2``), so that two programs of one name (a shipped one and a
    copy made into another algorithm, with the same kernels in other loops) do not take each other's tiles
    and kernel rates. Its comments, layout and file are not part of it."""
    calls = json.dumps([program.tiling.kind, sorted(program.kernels), [call.text for call in program.calls]])
    return f"{program.name}@{hashlib.sha256(calls.encode()).hexdigest()[:8]}"


def entry_key(program: str, gpus: int, backend: str) -> str:
    """``cholesky@5d1c09e2/cpu`` without GPUs, ``cholesky@5d1c09e2/cupy/2`` with two CuPy GPUs
    (``program``: its :func:`program_key`)."""
    return f"{program}/cpu" if gpus == 0 else f"{program}/{backend}/{gpus}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith(("model name", "Hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_names() -> list[str]:
    """NVIDIA GPUs as the driver lists them (Linux ``/proc/driver/nvidia``), in bus order.

    Read from the kernel driver rather than CuPy so that a run without GPUs finds
    the same machine key without importing CuPy.
    """
    root = Path("/proc/driver/nvidia/gpus")
    names = []
    try:
        for bus in sorted(root.iterdir()):
            try:
                text = (bus / "information").read_text()
            except OSError:
                continue
            model = re.search(r"^Model:\s*(.+)$", text, re.MULTILINE)
            names.append(model[1].strip() if model else "unknown NVIDIA GPU")
    except OSError:
        pass
    return names


# ---------------------------------------------------------------- reading and writing
def read(path: Path, warn=None, updating: bool = False) -> dict:
    """The cache file's content; an empty cache (and a warning) if it is unreadable or corrupt.
    ``updating``: one that exists but cannot be read is a :class:`UsageError` instead, since
    writing over it would drop its entries (a corrupt one is rewritten, as its warning says)."""
    warn = warn or warn_once
    try:
        text = usercache.read_bytes(path)  # json reads UTF-8 (and -16, -32); other bytes are a corrupt file
    except FileNotFoundError:
        return _empty()
    except OSError as error:
        if updating:
            raise UsageError(f"cannot read the tuning cache {path} to add to it: {error.strerror or error}; it was "
                             f"left as it is (set XDG_CACHE_HOME to a directory of your own)") from None
        warn(f"ignoring the tuning cache {path}: {error.strerror or error}")
        return _empty()
    try:
        content = json.loads(text)
        if not isinstance(content, dict) or not isinstance(content.get("entries"), dict):
            raise ValueError("not a tiledsl tuning file")
        if type(content.get("version", VERSION)) is not int:
            raise ValueError(f"its version is {_kind(content['version'])}, not a format number")
    except (ValueError, RecursionError) as error:  # RecursionError: nested too deep
        warn(f"ignoring the corrupt tuning cache {path} ({str(error).splitlines()[0]}); "
             f"run tiledsl tune again to rewrite it")
        return _empty()
    if content.get("version", VERSION) > VERSION:  # a newer tiledsl's: its entries may mean something else
        said = f"it is of format {content['version']}, a newer tiledsl's (this one reads format {VERSION})"
        if updating:  # rewriting it would drop what that tiledsl reads
            raise UsageError(f"cannot add to the tuning cache {path}: {said}; it was left as it is (use that "
                             f"tiledsl, or set XDG_CACHE_HOME to another directory)")
        warn(f"ignoring the tuning cache {path}: {said}")
        return _empty()
    return content


def check_storable(path: Path | None = None) -> None:
    """A :class:`UsageError`, before any timing, where :func:`store` could not add an entry: a cache
    that cannot be read, or a folder that cannot be written (a read-only one)."""
    path = cache_path() if path is None else path
    read(path, updating=True)
    probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
        with _updating(path):  # its lock file opens (not a folder left there), and the file itself is writable
            if path.exists():
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as error:
        raise UsageError(_unwritable(path, error)) from None


def store(key: str, entry: dict, path: Path | None = None, warn=None) -> Path:
    """Add or replace ``entry`` under ``key`` in this machine's file, atomically; its path."""
    path = cache_path() if path is None else path
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with _updating(path):
            content = read(path, warn, updating=True)
            content["version"] = VERSION
            content["machine"] = machine()
            content["entries"][key] = entry
            temporary.write_text(json.dumps(content, indent=1, sort_keys=True) + "\n")
            os.replace(temporary, path)
    except OSError as error:
        raise UsageError(_unwritable(path, error)) from None
    finally:
        if temporary.exists():
            temporary.unlink()
    return path


def _unwritable(path: Path, error: OSError) -> str:
    """Why the tuning cache at ``path`` cannot be written, naming the file that failed (its lock, a temporary)."""
    other = f" ({error.filename})" if error.filename and Path(error.filename) != path else ""
    return (f"cannot write the tuning cache {path}{other}: {error.strerror or error} (set XDG_CACHE_HOME to a "
            f"writable directory, or tune with --no-save)")


@contextlib.contextmanager
def _updating(path: Path):
    """The file at ``path`` to itself within the block (a lock file beside it): two tunes saving at
    once each keep the other's entry, where the later one's replacing the file as it had read it
    lost the other's, both saying they saved."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # (not blocking where a fifo is there: no reader, the open fails)
    lock = os.open(path.with_name(f".{path.name}.lock"), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK,
                   0o666)
    try:
        _lock(lock, path)
        yield
    finally:
        os.close(lock)


#: seconds a save waits for another process's lock on the cache before saying so, and before giving up
LOCK_NOTICE, LOCK_LIMIT = 1.0, 60.0


def _lock(lock: int, path: Path) -> None:
    """Hold ``lock`` (let go as the file closes); a lock another process keeps is said after
    :data:`LOCK_NOTICE` seconds, and refused after :data:`LOCK_LIMIT` (a saving tune holds it for
    milliseconds: a longer one is a stuck process, which must not hang this one)."""
    start, said = time.monotonic(), False
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            waited = time.monotonic() - start
            if waited >= LOCK_LIMIT:
                raise UsageError(f"cannot write the tuning cache {path}: another process has held its lock "
                                 f"(.{path.name}.lock) for {LOCK_LIMIT:g} s; a tiledsl tune saves in milliseconds, "
                                 f"so that process is stuck: end it, or set XDG_CACHE_HOME to another "
                                 f"directory") from None
            if waited >= LOCK_NOTICE and not said:
                print(f"tiledsl: waiting for another process's lock on the tuning cache {path} "
                      f"(up to {LOCK_LIMIT:g} s)", file=sys.stderr, flush=True)
                said = True
            time.sleep(0.05)


class Tuned(NamedTuple):
    """One cache entry as ``run`` uses it."""

    tiles: dict  # tile settings of the program's tiling kind
    ratio: tuple | None  # (H, G) host/GPU block columns of uniform tiles on GPUs
    params: dict  # program parameters tuned with these tiles ({"ib": 64}), {} if none
    path: Path  # the cache file, for the summary's "tuned (<path>)"
    host_takes: bool = False  # CPU workers taking GPU tasks was the fastest (--host-takes on)
    kernel_module: str | None = None  # the digest of the kernel module tune measured (and its helpers), if any
    kernel_helpers: tuple = ()  # those helpers: files beside the module, relative to its folder


def entry(program: str, gpus: int, backend: str, path: Path | None = None, warn=None) -> dict | None:
    """This machine's cache entry for the program (its :func:`program_key`) and GPU setup as stored (None: never tuned, or
    an entry that is no object); its kernel rates (``speeds``) left out, with a warning, where
    they cannot be read as rates (a cache edited by hand: a run failed as an internal error)."""
    warn, path = warn or warn_once, cache_path() if path is None else path
    key = entry_key(program, gpus, backend)
    found = read(path, warn)["entries"].get(key)
    if found is not None and not isinstance(found, dict):
        warn(f"ignoring the tuned entry {key} of {path}: {_kind(found)}, not an object; {_REWRITE}")
        return None
    wrong = _unreadable_rates(found.get("speeds")) if found else None
    if wrong is not None:
        warn(f"ignoring the kernel rates of the tuned entry {key} of {path}: {wrong}; {_REWRITE}")
        return {name: value for name, value in found.items() if name != "speeds"}
    return found


_REWRITE = "run tiledsl tune again to rewrite it"


def _unreadable_rates(speeds) -> str | None:
    """Why a cache entry's ``speeds`` ({device: {kernel: rates}}) cannot be read as rates; None
    where they can, or there are none."""
    if speeds is None:
        return None
    if not isinstance(speeds, dict):
        return f"speeds is {_kind(speeds)}, not an object of the devices' rates"
    try:
        for device, table in speeds.items():
            Rates(table, device)
    except RateError as error:
        return str(error)
    return None


def _kind(value) -> str:
    """``the text 'x'``, ``the number 3``, ...: a value of JSON as a message names it."""
    kind = {str: "the text", bool: "the boolean", int: "the number", float: "the number", list: "the list"}
    return f"{kind.get(type(value), 'the value')} {json.dumps(value)[:40]}"


def lookup(program: str, tiling: str, gpus: int, backend: str, warn=None, path: Path | None = None):
    """The :class:`Tuned` values for this program (its :func:`program_key`) and GPU setup, or None.

    An entry that does not fit the program's tiling kind is ignored with a warning.
    """
    warn = warn or warn_once
    path = cache_path() if path is None else path
    entry = read(path, warn)["entries"].get(entry_key(program, gpus, backend))
    if entry is None:
        return None
    try:
        if not isinstance(entry, dict):
            raise ValueError(f"{_kind(entry)}, not an object")
        if "tiles" not in entry:  # tune writes them always: a hand edit
            raise ValueError("it has no tile settings")
        tiles = entry.get("tiles") or {}
        if not isinstance(tiles, dict) or set(tiles) - set(TILING_SETTINGS.get(tiling, ())):
            raise ValueError(f"tile settings {sorted(tiles)} do not fit {tiling} tiling")
        tiles = {name: _positive(value, name) for name, value in tiles.items()}
        ratio = entry.get("gpu_ratio")
        if ratio is not None:
            if not isinstance(ratio, list) or len(ratio) != 2:
                raise ValueError(f"gpu_ratio is {_kind(ratio)}, not a pair [H, G] of host and GPU columns")
            ratio = (_positive(ratio[0], "gpu_ratio's host columns", 0),
                     _positive(ratio[1], "gpu_ratio's GPU columns"))
        params = entry.get("params") or {}
        if not isinstance(params, dict):
            raise ValueError(f"params is {_kind(params)}, not an object of names and values")
        params = {name: _positive(value, name) for name, value in params.items()}
        if entry.get("host_takes", False) not in (True, False):
            raise ValueError(f"host_takes is {_kind(entry['host_takes'])}, not true or false")
    except (TypeError, ValueError, AttributeError) as error:
        warn(f"ignoring the tuned entry {entry_key(program, gpus, backend)} of {path}: {error}; {_REWRITE}")
        return None
    module, helpers = entry.get("kernel_module"), entry.get("kernel_helpers") or []
    return Tuned(tiles, ratio, params, path, entry.get("host_takes") is True,
                 module if isinstance(module, str) else None, helpers_of(helpers))


def helpers_of(value) -> tuple:
    """An entry's ``kernel_helpers`` as file names (none where it is not a list of names: a hand edit)."""
    return tuple(value) if isinstance(value, list) and all(isinstance(name, str) for name in value) else ()


def edited_module(program, measured: str | None, path: Path, digest: str | None) -> str | None:
    """A warning where the program's kernel module (``digest``: its :func:`~.userkernels.kernel_module_digest`
    now) differs from the one whose digest tune recorded (``measured``) in the cache at ``path``."""
    if measured is None or digest is None or digest == measured:
        return None
    return (f"{program.kernel_module} (or a helper file it imports) has changed since tiledsl tune measured "
            f"{program.name} with it: the tuned tile sizes and kernel rates ({path}) are those of the module as it "
            f"was then; run tiledsl tune again")


def _positive(value, name: str, least: int = 1) -> int:
    """``value``, an integer from ``least`` to 2**63 − 1 (what a run takes for a setting)."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= INT64_MAX:
        raise ValueError(f"{name} = {value!r} is not an integer from {least} to 2**63 - 1")
    return value


def _empty() -> dict:
    return {"version": VERSION, "entries": {}}


_warned: set = set()  # the default warnings said in this process


def warn_once(message: str) -> None:
    """The default warning, on stderr once per process: a command may read the cache more than once
    (simulate: its tile sizes, then this machine's kernel rates), each read meeting the same fault."""
    if message not in _warned:
        _warned.add(message)
        print(f"tiledsl: warning: {message}", file=sys.stderr, flush=True)


#: host:GPU column ratios the uniform search walks through, by the host's share
RATIOS = sorted({Fraction(h, g) for g in (1, 2, 3, 4) for h in range(0, 17)})


def nearest_ratio(host_rate: float, gpu_rate: float, gpus: int) -> tuple[int, int]:
    """``(H, G)`` from :data:`RATIOS` whose host share of the columns, ``H / (H + G·gpus)``,
    is nearest the host's share of the speed, ``host / (host + gpus·gpu)``."""
    target = host_rate / (host_rate + gpus * gpu_rate)
    best = min(RATIOS, key=lambda r: (abs(_share(r, gpus) - target), r.numerator + r.denominator))
    return best.numerator, best.denominator


def _share(ratio: Fraction, gpus: int) -> float:
    return ratio.numerator / (ratio.numerator + ratio.denominator * gpus)
