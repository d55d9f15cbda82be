from tests.support.browser import browser  # noqa: F401  (a fixture)
