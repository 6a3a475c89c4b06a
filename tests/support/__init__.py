"""Helpers shared by the tests (the beginning of one home for them: see issue 12)."""
