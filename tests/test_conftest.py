"""The suite's own scheduling: tests that share a costly session fixture, or must not run beside
each other, carry an ``xdist_group`` mark, which ``--dist loadgroup`` (pyproject's addopts) honours."""
import pytest


@pytest.mark.xdist_group("the-suites-scheduling")
def test_xdist_groups_reach_the_scheduler(request):
    """pytest 9.2 and pytest-xdist 3.8 lost them without a word (pytest-xdist issue 1386: xdist gives a
    test its group through the node id field pytest 9.2 no longer reads): each group's tests spread
    over the workers, every shared fixture was made once per worker, and everything still passed."""
    if not hasattr(request.config, "workerinput") or not request.config.getvalue("loadgroup"):
        pytest.skip("not a worker of --dist loadgroup")
    assert request.node.nodeid.endswith("@the-suites-scheduling"), (
        f"{request.node.nodeid}: the scheduler does not see this test's group; install the pytest that "
        f"pyproject.toml's test extra names")
