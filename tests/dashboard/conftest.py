from tests.config.test_admin_pages import operator  # noqa: F401  (a fixture: a signed-in superuser's client)
from tests.dashboard.test_phone_and_a11y import tenant  # noqa: F401  (a fixture: a tenant with traffic)
from tests.support.browser import browser  # noqa: F401  (a fixture)
