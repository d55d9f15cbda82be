import pytest

from tests.config.test_admin_pages import operator  # noqa: F401  (a fixture: a signed-in superuser's client)
from tests.dashboard.test_phone_and_a11y import tenant  # noqa: F401  (a fixture: a tenant with traffic)
from tests.support.browser import (
    ARTIFACTS,
    DESKTOP,
    PHONE,
    browser,  # noqa: F401  (a fixture)
    open_page,
)


@pytest.fixture(name="page", params=[DESKTOP, PHONE], ids=["desktop", "phone"])
def page_at_each_width(browser, request):  # noqa: F811  (`browser` is the fixture above)
    """A browser tab at a desktop and then a phone width, its last screen kept; a module
    whose walk is desktop-only defines its own `page`."""
    tab = open_page(browser, ARTIFACTS / "dashboard" / request.node.name, viewport=request.param)
    yield tab
    tab.shot("last")
    tab.context.close()
