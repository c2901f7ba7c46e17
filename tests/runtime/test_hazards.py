"""RAW, WAR and WAW hazards on one tile are honoured whatever the worker count."""
import numpy as np
import pytest

from tiledsl.runtime import Options, execute


def expected_log(rounds: int) -> np.ndarray:
    log, x = np.zeros((rounds, 3)), 0.0
    for r in range(rounds):
        x += 1
        log[r, 0] = log[r, 1] = x
        x *= 10
        log[r, 2] = x
    return log


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_hazards_follow_program_order(compiled, workers):
    driver = compiled("tests/runtime/programs/hazards.tile")
    rounds = 12
    result = execute(driver, Options(n=rounds, tiles={"nb": 1}, workers=workers))
    log = result.matrices["Log"].assemble()
    assert np.array_equal(log, expected_log(rounds))
