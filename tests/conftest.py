"""Test-wide settings.

Each compile in the tests is a fresh one: the on-disk dispatch cache is off
(TORQ_CACHE_DIR=none; a warm cache would let a later test skip the code it
means to exercise, and a test that patches the compiler would read the
executable of an unpatched compile), and dispatches compile in the test's own
process (TORQ_JOBS=1: worker processes would not see a patched compiler, and
starting them costs more than the small test models' compiles). The in-memory
cache within one compile stays on. tests/e2e/test_dispatch_cache.py sets both
explicitly.
"""

import os

os.environ.setdefault("TORQ_CACHE_DIR", "none")
os.environ.setdefault("TORQ_JOBS", "1")
