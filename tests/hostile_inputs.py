"""Moved to ocrcli/testing/hostile_inputs.py (scripts/stress.py shares it and must not import
from tests/); this name stays for the tests that import it."""

from ocrcli.testing.hostile_inputs import *  # noqa: F403
