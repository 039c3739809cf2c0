"""What the test suite and scripts/stress.py share: hostile inputs, hostile model folders,
and a harness that runs the real `ocrcli` and judges what it did. ocrcli itself never
imports this package."""
