"""Settings every test suite shares, and the outside tools installed before any test."""

import pytest
from hypothesis import settings

from tests import tools

# No per-example deadline: on a loaded two-core machine (or the first example that imports
# Arrow or numpy) a wall-clock bound fails tests that are right. Properties, not timings.
settings.register_profile("raftka", deadline=None)
settings.load_profile("raftka")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Install the outside tools (``tests.tools``) once, before any test or xdist worker
    starts, so no test depends on the order the tests run in or on an earlier run."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: its controller did it
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    tools.install_missing(say=reporter.write_line if reporter is not None else print)
