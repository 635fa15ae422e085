"""Shared test settings: every test has a timeout (pyproject: [tool.pytest.ini_options])."""
