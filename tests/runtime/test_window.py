"""The task window bounds memory: a program of hundreds of thousands of tasks runs in a bounded window."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_a_long_run_stays_in_a_bounded_window_and_memory(tmp_path):
    # Peak memory after a run of 20,000 tasks and after one of 60,000 more: a runtime that kept
    # finished tasks alive would grow by more than 18 MB (a task is ~300 bytes); this one grows by
    # 1-2 MB. The first run sets the baseline (its size makes no difference to that growth).
    script = textwrap.dedent(f"""
        import json, resource
        from tiledsl.compiler import compile_path
        from tiledsl.driverload import import_driver
        from tiledsl.runtime import Options, execute
        result, text = compile_path({str(ROOT / 'benchmarks/overhead.tile')!r})
        path = {str(tmp_path / 'overhead.py')!r}
        open(path, 'w').write(text)
        driver = import_driver(path)
        report = {{}}
        for steps in (2, 8):
            run = execute(driver, Options(n=100, tiles={{'nb': 1}}, sets={{'steps': steps}},
                                          window=1000, workers=2))
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            report[steps] = {{'tasks': run.tasks, 'window': run.stats['peak_window'], 'rss': peak}}
        print(json.dumps(report))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=230)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    small, large = report["2"], report["8"]
    assert (small["tasks"], large["tasks"]) == (20_000, 80_000)
    assert large["window"] <= 1000
    assert large["rss"] - small["rss"] < 10 * 2 ** 20, report


@pytest.mark.timeout(60)
@pytest.mark.parametrize("window", [1, 2, 5])
def test_on_one_rank_without_gpus_the_window_never_holds_more_tasks_than_its_size(compiled, window):
    from tiledsl.runtime import Options, execute

    run = execute(compiled("programs/cholesky.tile"), Options(n=400, tiles={"nb": 64}, window=window, workers=2))
    assert run.tasks == 84 and run.stats["peak_window"] == window
