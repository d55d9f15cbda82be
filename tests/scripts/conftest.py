from tests.support.browser import browser  # noqa: F401  (a fixture)
from tests.support.checkouts import checkout, module_checkout  # noqa: F401  (fixtures)
