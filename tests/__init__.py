"""shardcron's tests: a package, so that test modules import what they share by name.

Shared fixtures are in ``tests/conftest.py``; the helpers behind them, and the
builders the store tests share, are in ``tests/support/``. pytest runs from the
repository root (``pythonpath = ["."]``), so ``deploy`` and ``tests.support``
import without touching ``sys.path``.
"""
