"""Test helpers shipped with the code (stubs of systems that cannot run in CI)."""
