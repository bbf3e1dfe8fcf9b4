"""Settings every test suite shares."""

from hypothesis import settings

# No per-example deadline: on a loaded two-core machine (or the first example that imports
# Arrow or numpy) a wall-clock bound fails tests that are right. Properties, not timings.
settings.register_profile("raftka", deadline=None)
settings.load_profile("raftka")
