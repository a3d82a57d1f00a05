"""pytest plugin: run `async def test_*` functions with asyncio.run.

The portable tests are plain functions so that tests/mp/testrunner.py can run
them on MicroPython; it runs coroutine tests to completion, and this gives pytest
the same behaviour without a third-party plugin (pytest fails async tests when
none is installed). Loaded by addopts "-p pytest_async" in pyproject.toml.
"""

import asyncio
import inspect

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None  # let pytest call it
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True
