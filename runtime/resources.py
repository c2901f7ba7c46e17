"""Will the run fit? Memory estimates for the host and each GPU, checked before any work:
the refusal (with the numbers) of a run that cannot fit in the host or leaves a rank without
tiles, and the bound of each GPU's cache when its tiles do not fit it (out of core)."""
from __future__ import annotations

import gc
import os
import resource
import threading

from .errors import more_ranks
from .options import COMMAND_LINE, Spelling
from .world import UsageError, address_limited, ranks_text


#: what a rank keeps for each tile it owns besides the tile's values (the tile's object, its
#: array's header, its entries in the tables that find it): about 490 bytes measured at --nb 1,
#: 585 with the array
TILE_RECORD_BYTES = 512


def check_memory(program, matrices: dict, needed: set | None, window: int, check: bool, share: float = 1.0,
                 sized_by_inputs: bool = False, spelling: Spelling = COMMAND_LINE, threads: tuple = (0, 0)) -> None:
    """Refuse, with the numbers, a run whose tiles cannot fit in this machine's memory.

    The estimate: the tiles this rank stores (``share`` of them), their values and
    :data:`TILE_RECORD_BYTES` for each tile it owns (what tiny tiles cost above all), two copies of a
    tile per task of the window when data moves between places, and the matrices
    a check builds (one like A for Cholesky and LU, three for QR). ``sized_by_inputs``: the inputs
    given (files, arrays) fix the sizes, which a smaller --n cannot change. ``spelling``: how the
    advice names the settings (the command line's options, or the Python API's arguments).
    ``needed``: the tiles the run touches, of which this rank stores those it owns; None for every
    tile it owns, counted without making them. ``threads``: the threads the run starts, its workers and
    the others (GPU managers, the watchdog), whose reservations (:func:`thread_address_space`) count
    under an address-space limit.
    """
    extents = [m.owned_extent() for m in matrices.values()]  # a record for each: the inputs make them all
    count = sum(c for c, _ in extents)
    values = sum(v for _, v in extents) if needed is None else \
        sum(8 * h * w for tile in needed if tile.rank == tile.matrix.rank for h, w in [tile.shape])
    records = TILE_RECORD_BYTES * count
    tiles = values + records
    largest = largest_tile_bytes(matrices)
    transfers = 2 * window * largest
    first = matrices[program.matrices[0].name] if program.matrices else None
    checking = 0
    if check and program.check is not None and first is not None:
        checking = (3 if program.check.kind == "qr" else 1) * 8 * first.m * first.n // max(1, first.distribution.nranks)
    total = share * values + records + transfers + checking  # every record is made: the inputs make them all
    available, limit, reserved = _room(threads)
    if available is not None and total + reserved > available:
        gc.collect()  # an earlier run's cycles (from Python, its arrays among them) held what this one needs
        available, limit, reserved = _room(threads)
    total += reserved
    if available is None or total <= available:
        _reserved["workers"] = max(_reserved["workers"], threads[0])
        return
    needs, has = compared_bytes(total, available)  # in MiB or KiB where small (a ulimit -v of a few hundred MiB)
    tiny = records > values  # the records outweigh the values: larger tiles shrink the estimate most
    counted = f", {bytes_text(records)} of it the records of {count:,} tiles" if tiny else ""
    if share < 1:  # a first look, before the run's own tiles are known: a lower bound
        need = (f"at least {needs} on this rank ({share:.0%} of the {bytes_text(values)} of tiles it owns, and "
                f"{bytes_text(records)} of their records, before counting those its tasks touch, the transfer "
                f"buffers and the check)")
    else:
        of_threads = f", threads {bytes_text(reserved)} ({THREADS_SAID})" if reserved else ""
        need = (f"about {needs} on this rank (tiles {bytes_text(tiles)}{counted}, transfer buffers "
                f"{bytes_text(transfers)}, check {bytes_text(checking)}{of_threads})")
    # the tiles and the check shrink with the size and the ranks, the threads' reservations do not: where those
    # alone exceed what is available, neither a smaller size nor more ranks can make the run fit
    sizes_help = reserved < available
    # what each setting can give back at most: the window down to 1, the check dropped, one worker left
    stack = thread_stack_bytes()
    savings = {"window": transfers - 2 * largest, "check": checking,
               "workers": reserved - thread_address_space(1, threads[1]) if reserved and threads[0] > 1 else 0,
               # thread stacks of 1 MiB (ulimit -s 1024) hold a run's threads
               "stacks": sum(threads) * max(0, stack - STACK_ENOUGH) if reserved else 0}
    remedies = _remedies(transfers, checking, limit == _ADDRESS_LIMIT, sized_by_inputs, spelling, tiny,
                         bool(reserved) and threads[0] > 1, sizes_help, (savings, total - available))
    raise UsageError(f"the run needs {need} but {has} is available{limit}: {remedies}")


def _room(threads: tuple) -> tuple:
    """``(available, the limit met, the threads' reservations counted)`` for a run starting ``threads``
    (:func:`_available_memory`): the reservations count against the address-space limit alone."""
    available, limit = _available_memory()
    reserved, left = thread_address_space(*threads), address_space_left()
    if reserved and left is not None and (available is None or left - reserved < available):
        available, limit = left, _ADDRESS_LIMIT  # the threads make this limit the nearest
    return available, limit, reserved if limit == _ADDRESS_LIMIT else 0


#: a thread stack a run's threads do with (their frames are shallow): a smaller ``ulimit -s`` is advised down to it
STACK_ENOUGH = 2 ** 20

#: a worker's buffers for its first BLAS calls, one for each OpenBLAS (numpy's and SciPy's), which count under
#: ulimit -v alone (the address space is reserved, no memory used yet): where the limit leaves no room for them,
#: OpenBLAS waits, gives up and the process crashes. The malloc arenas of threads (64 MiB each) are not counted:
#: under the limit the threads share one (:func:`.world.share_malloc_arenas`).
BLAS_BUFFER_BYTES = 32 * 2 ** 20
BLAS_LIBRARIES = 2
THREADS_SAID = "each thread's stack and a worker's BLAS buffers, reserved under ulimit -v"


def thread_address_space(workers: int, others: int) -> int:
    """The address space a run's threads, ``workers`` and ``others``, reserve: their stacks, and the BLAS buffers
    of the workers beyond the most an earlier run of this process started (OpenBLAS keeps them for the next)."""
    buffers = max(0, workers - _reserved["workers"]) * BLAS_LIBRARIES * BLAS_BUFFER_BYTES
    return (workers + others) * thread_stack_bytes() + buffers


_reserved = {"workers": 0}  # the most workers a run of this process was let start (check_memory)


def thread_stack_bytes() -> int:
    """The stack a new thread reserves: Python's setting, else the soft ``ulimit -s``, else (no limit) the C
    library's default on x86-64, 2 MiB."""
    limit = resource.getrlimit(resource.RLIMIT_STACK)[0]
    return threading.stack_size() or (limit if limit != resource.RLIM_INFINITY else 2 * 2 ** 20)


def shortage_remedies(transfers: bool, check: bool, sized_by_inputs: bool, spelling: Spelling,
                      workers: int = 1) -> str:
    """What helps a run that ran out of memory although its estimate fitted (it took more, or other
    processes took memory since): a refusal's remedies, for a run with ``transfers`` (tiles in
    transit, as many as the window's tasks) and a ``check``, as ``spelling`` writes the settings, and
    fewer of its ``workers`` where it has several (each runs a kernel, and its memory, at once)."""
    return _remedies(int(transfers), int(check), address_limited(), sized_by_inputs, spelling, threads=workers > 1)


def _remedies(transfers: int, checking: int, per_process: bool, sized_by_inputs: bool = False,
              spelling: Spelling = COMMAND_LINE, tiny: bool = False, threads: bool = False,
              sizes_help: bool = True, gap: tuple | None = None) -> str:
    """The advice of a refusal: only what shrinks a part of the estimate refused (the window sizes the
    transfer buffers, --check the check's matrices, fewer ``threads`` their reservations); more ranks on
    this node divide the tiles but not the node's memory, which every rank there compares its own estimate
    with, except under a limit of each process's (``per_process``: ulimit -v), which may be raised too. A run
    from Python is one rank: more ranks there are the command line's. Neither more ranks nor a smaller size
    are advised where what they do not shrink exceeds what is available (``sizes_help``). ``gap``: (the
    bytes each of window, check, workers and thread stacks can give back at most, the bytes missing), where
    known: where some of them alone close the gap only those are advised; where none does, none is unless a
    smaller size or more ranks may help too (a window of 1 already gives nothing back, and is never advised)."""
    stacks = False
    if gap is not None:
        savings, missing = gap
        enough = {name: saved for name, saved in savings.items() if saved >= missing}  # each alone makes it fit
        if enough or not sizes_help:  # the others, or all where none helps and the size cannot either: unsaid
            savings = {name: enough.get(name, 0) for name in savings}
        transfers, checking = transfers and savings["window"] > 0, checking and savings["check"] > 0
        threads = threads and savings["workers"] > 0
        stacks = savings["stacks"] > 0
    size = ("smaller inputs (the files or arrays given fix the sizes)" if sized_by_inputs
            else f"a smaller {spelling.setting('n')}")
    ranks = more_ranks(per_process)
    remedies = [f"{ranks} with tiledsl run --np (a run from Python is one rank)" if spelling.api else ranks, size]
    remedies = remedies if sizes_help else []
    if tiny:  # (tiny tiles: their records outweigh their values)
        remedies.insert(0, "larger tiles")
    if threads:  # (their reservations counted, and more than one worker's)
        remedies.insert(len(remedies) - (len(remedies) > 1), f"fewer workers ({spelling.valued('workers', 'N')})")
    if transfers and not spelling.api:  # the API has no window to set
        remedies.append("a smaller --window")
    if stacks:
        remedies.append(f"smaller thread stacks (ulimit -s, {bytes_text(thread_stack_bytes())} now)")
    used = "use " + ", ".join(remedies[:-1]) + f" or {remedies[-1]}" if len(remedies) > 1 else \
        f"use {remedies[0]}" if remedies else ""
    advice = ", or ".join(filter(None, ["raise the limit" if per_process else "", used]))
    without_check = "run with check=False" if spelling.api else "run without --check"
    if not advice:  # nothing but the check to drop
        return without_check if checking else "free memory, or run on a machine with more"
    return advice + (f", or {without_check}" if checking else "")


def gpu_cache_bytes(matrices: dict, share, window: int, devices, limit: int | None, rank: int,
                    limit_name: str = "--gpu-memory") -> int | None:
    """None when each of this rank's GPUs holds its tiles (an in-memory run); else the bytes each
    GPU's cache of tiles may hold in an out-of-core run (:mod:`.outofcore`): ``limit``
    (``limit_name``: ``--gpu-memory``, or ``gpu_memory`` from the API) and at most the smallest
    GPU's free memory less room for the kernels' workspace. Refuses, with the numbers, a bound
    that cannot hold the largest tile.

    The in-memory estimate per GPU: the tiles homed there (of ``share.needed``, those this rank's tasks
    touch), and the copies it may hold at once (alien inputs and minor outputs): two of a tile
    per task of the window, and never more than two of each tile that the tasks it runs touch
    (``share.run_on``: device -> those tiles) and that lives elsewhere (tiles only host tasks read
    are not copied to it). A GPU homing none of the tiles this rank's tasks touch runs none
    of them, and holds nothing.
    """
    if devices is None:
        return None
    needed, run_on = share.needed, share.run_on
    largest = largest_tile_bytes(matrices)
    # the cache must take the largest tile its GPUs home, where a task runs on them (a task needing more is
    # refused as it comes); kernels without a GPU body run on the host, and leave the caches empty
    running = {device for device, kernels in share.kernels_on.items() if device and kernels & set(devices.kernels)}
    largest_homed = max((8 * h * w for tile in needed if tile.rank == tile.matrix.rank and tile.device in running
                         for h, w in [tile.shape]), default=0)
    bounds, fits = [limit] if limit is not None else [], True
    for device in range(1, devices.gpus + 1):
        tiles = sum(8 * h * w for tile in needed if tile.rank == tile.matrix.rank and tile.device == device
                    for h, w in [tile.shape])
        if not tiles:  # a task runs where its main output lives: none here
            continue
        elsewhere = sum(8 * h * w for tile in run_on.get(device, ())
                        if not (tile.rank == tile.matrix.rank and tile.device == device) for h, w in [tile.shape])
        copies = 2 * min(window * largest, elsewhere)
        free = devices.free_memory(device)
        if free is not None:
            bounds.append(free - WORKSPACE - WORKSPACE_TILES * largest)
        known = [size for size in (free, limit) if size is not None]
        fits = fits and (not known or tiles + copies <= min(known))
    if fits:
        return None
    capacity = min(bounds)
    if capacity < largest_homed:
        given = f"{limit_name} allows" if capacity == limit else "the GPUs have free for tiles"
        allowed, tile = compared_bytes(max(capacity, 0), largest_homed)
        raise UsageError(f"GPU tiles of rank {rank} go out of core, but {given} {allowed}, less than the largest "
                         f"tile its GPUs hold ({tile}): allow more, or use smaller tiles")
    return capacity


#: Room a GPU keeps beside its cache of tiles for the kernels' own workspace (cuSOLVER's, QR's
#: temporaries) when its free memory bounds the cache: this much, and this many of the largest tile.
WORKSPACE = 2 ** 30
WORKSPACE_TILES = 4


def gib(size: float) -> str:
    return f"{size / 2 ** 30:.2f} GiB"


def bytes_text(size: float, digits: int = 2) -> str:
    """``size`` bytes in GiB, or in MiB below one GiB, KiB below one MiB (so that small sizes,
    a cache of a few tiles, still tell apart), bytes below one KiB."""
    if size >= 2 ** 30:
        return gib(size)
    for unit, scale in (("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if size >= scale:
            return f"{size / scale:.{digits}f} {unit}"
    return f"{size:.0f} byte" + ("" if size == 1 else "s")


def compared_bytes(first: float, second: float) -> tuple[str, str]:
    """Two sizes to be compared, as :func:`bytes_text` writes them, or in bytes where those would
    read alike but the sizes differ (720,000 bytes against 719,999, not 703.12 KiB against 703.12 KiB)."""
    texts = bytes_text(first), bytes_text(second)
    if texts[0] != texts[1] or first == second:
        return texts
    return f"{first:,.0f} bytes", f"{second:,.0f} bytes"


def _available_memory() -> tuple[int | None, str]:
    """Bytes of memory this process may still take (None if unknown), and which limit that is ('' for the
    machine's free memory): the least of Linux's MemAvailable, what the address-space limit (``ulimit
    -v``) leaves, and what this process's control group (a container's memory limit) leaves. Past the
    first the process gets a MemoryError, past the last the kernel kills it."""
    limits = [(meminfo("MemAvailable"), ""), (address_space_left(), _ADDRESS_LIMIT),
              (cgroup_memory_left(), " (under this container's memory limit)")]
    known = [(size, why) for size, why in limits if size is not None]
    return min(known, key=lambda limit: limit[0]) if known else (None, "")


_ADDRESS_LIMIT = " (under the address-space limit, ulimit -v)"  # how a refusal names that limit


def address_space_left(status: str = "/proc/self/status") -> int | None:
    """Bytes the address-space limit (RLIMIT_AS) leaves this process, or None without one."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return None
    size = _status_field(status, "VmSize")
    return max(0, limit - size) if size is not None else limit


#: address space left under ``ulimit -v`` below which a stall is likely OpenBLAS's: it waits for ever for the
#: buffers (32 MiB each) of a thread's first BLAS call where it cannot have them
BLAS_BUFFERS = 64 * 2 ** 20


def address_space_note() -> str:
    """What a stall report adds where the address-space limit leaves this process too little for
    BLAS's buffers, which it then waits for for ever; '' elsewhere."""
    left = address_space_left()
    if left is None or left >= BLAS_BUFFERS:
        return ""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    return (f"; only {bytes_text(left)} of address space is left under this process's limit (ulimit -v "
            f"{limit // 1024}, in KiB), where a BLAS waits for ever for buffers it cannot have: raise the limit")


def cgroup_memory_left(cgroups: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process's memory control group leaves, or None without a limit (or where none can be
    read). Its file cache (inactive files) counts as free, as the kernel reclaims it before it kills."""
    try:
        with open(cgroups) as lines:
            entries = [line.rstrip("\n").split(":", 2) for line in lines]
    except OSError:
        return None
    for _, controllers, path in (entry for entry in entries if len(entry) == 3):
        if "memory" in controllers.split(","):  # cgroup v1
            folder = f"{root}/memory{path}"
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
            break
    else:  # cgroup v2: the one hierarchy, "0::PATH"
        path = next((path for number, controllers, path in entries if number == "0" and not controllers), None)
        if path is None:
            return None
        folder = f"{root}{path}" if os.path.exists(f"{root}{path}/memory.max") else f"{root}/unified{path}"
        files = ("memory.max", "memory.current", "inactive_file")
    limit, usage = _number_in(f"{folder}/{files[0]}"), _number_in(f"{folder}/{files[1]}")
    total = meminfo("MemTotal")
    if limit is None or usage is None or (total is not None and limit >= total):  # "max", or above the machine
        return None
    return max(0, limit - usage + (_stat_field(f"{folder}/memory.stat", files[2]) or 0))


def _number_in(path: str) -> int | None:
    try:
        with open(path) as file:
            return int(file.read().strip())
    except (OSError, ValueError):  # absent, or "max"
        return None


def _stat_field(path: str, field: str) -> int | None:
    """A field of a cgroup's memory.stat (``NAME VALUE`` lines, in bytes)."""
    try:
        with open(path) as lines:
            for line in lines:
                name, _, value = line.partition(" ")
                if name == field:
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def _status_field(path: str, field: str) -> int | None:
    """A ``NAME: VALUE kB`` field of /proc/self/status (or /proc/meminfo) in bytes."""
    try:
        with open(path) as lines:
            for line in lines:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def meminfo(field: str) -> int | None:
    """A Linux /proc/meminfo field in bytes (``MemTotal``, ``MemAvailable``), or None if unknown."""
    return _status_field("/proc/meminfo", field)


def largest_tile_bytes(matrices: dict) -> int:
    """The bytes of the largest tile of any matrix (from the geometries: no tile is made)."""
    return max((8 * _widest(m.geometry.row_starts) * _widest(m.geometry.col_starts) for m in matrices.values()),
               default=0)


def _widest(starts) -> int:
    return max((b - a for a, b in zip(starts, starts[1:])), default=0)


def _ranks_with_tiles(placements, ranks: int) -> set:
    """The ranks owning some tile of the ``(distribution, mt, nt)`` placements."""
    owners = set()
    for distribution, mt, nt in placements:
        for rank in range(ranks):
            lines = distribution.lines_of(rank, mt, nt)
            if lines is None:  # a distribution that cannot say: look at every tile
                owners.update(distribution.rank_of(i, j) for i in range(mt) for j in range(nt))
                break
            if len(lines[0]) and len(lines[1]):
                owners.add(rank)
    return owners


def every_rank_has_tiles(program, matrices: dict, ranks: int) -> bool:
    """Whether every rank owns a tile of some matrix of the program."""
    return len(_owners(program, matrices, ranks)) == ranks


def _owners(program, matrices: dict, ranks: int) -> set:
    """The ranks owning a tile of some matrix of the program (all of them on one rank or
    without matrices: nothing to check)."""
    if ranks == 1 or not program.matrices:
        return set(range(ranks))
    return _ranks_with_tiles([(matrices[d.name].distribution, matrices[d.name].mt, matrices[d.name].nt)
                              for d in program.matrices], ranks)


def ranks_without_tiles(program, matrices: dict, ranks: int, advice) -> str | None:
    """The warning of a run where some rank owns no tile of any matrix: it has nothing to do
    (the run goes on without it), with ``advice()`` (:func:`.gridadvice.idle_rank_advice`, called
    only to warn: it walks the loop nest)."""
    owners = _owners(program, matrices, ranks)
    if len(owners) < ranks:
        name, largest = max(((decl.name, matrices[decl.name]) for decl in program.matrices),
                            key=lambda item: item[1].mt * item[1].nt)
        slices = getattr(largest.distribution, "s", 1)  # hybrid tiles: a block column of s slices is placed whole
        columns = f", {-(-largest.nt // slices)} block column(s) of {slices} slices" if slices > 1 else ""
        idle = sorted(set(range(ranks)) - set(owners))
        return (f"{ranks} ranks but only {len(owners)} of them own tiles (the largest matrix, {name}, has "
                f"{largest.mt}×{largest.nt} tiles{columns}): {ranks_text(idle)} ha{'s' if len(idle) == 1 else 've'} "
                f"nothing to do; {advice()}")
    return None
