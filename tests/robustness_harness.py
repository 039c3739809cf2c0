"""Moved to ocrcli/testing/harness.py (scripts/stress.py shares it and must not import from
tests/); this name stays for the tests that import it."""

from ocrcli.testing.harness import *  # noqa: F403
