"""The task window bounds memory: a million-task program runs in a bounded window."""
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_a_million_tasks_run_in_a_bounded_window(tmp_path):
    script = textwrap.dedent(f"""
        import json, resource, sys
        from tiledsl.compiler import compile_path
        from tiledsl.driverload import import_driver
        from tiledsl.runtime import Options, execute
        result, text = compile_path({str(ROOT / 'benchmarks/overhead.tile')!r})
        path = {str(tmp_path / 'overhead.py')!r}
        open(path, 'w').write(text)
        driver = import_driver(path)
        run = execute(driver, Options(n=100, tiles={{'nb': 1}}, sets={{'steps': 100}}, window=1000, workers=2))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps({{'tasks': run.tasks, 'peak': run.stats.peak_window, 'rss': rss,
                          'seconds': run.seconds}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=230)
    assert out.returncode == 0, out.stderr
    import json
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["tasks"] == 1_000_000
    assert report["peak"] <= 1000
    # 10,000 tile objects and a 1000-task window: far below what a million live tasks would take
    assert report["rss"] < 200 * 2 ** 20, report
