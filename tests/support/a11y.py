"""Accessibility checks in the browser tests: axe-core (vendored, see vendor/VENDORED.md)
injected into a Playwright page.

`violations(page)` runs axe's WCAG 2.0/2.1/2.2 A and AA rules on the page as it is now and
returns the serious and critical ones, each with its rule id, impact, help text and the CSS
selectors of the failing elements, small enough to read in an assertion message.
"""

from __future__ import annotations

from pathlib import Path

AXE_JS = Path(__file__).parent / "vendor" / "axe.min.js"
WCAG_A_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]

_RUN = """async (tags) => {
  const result = await axe.run(document, {runOnly: {type: "tag", values: tags}});
  return result.violations.map((v) => ({
    id: v.id,
    impact: v.impact,
    help: v.help,
    targets: v.nodes.map((n) => n.target.join(" ")),
  }));
}"""


def violations(page, *, impact: tuple[str, ...] = ("serious", "critical")) -> list[dict]:
    """Return axe's WCAG A/AA violations on `page` at the given impacts, rule by rule."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        # Evaluated through the DevTools protocol, not added as a <script>: the pages'
        # Content-Security-Policy refuses an inline script, and would record a violation.
        page.evaluate(AXE_JS.read_text())
    found = page.evaluate(_RUN, WCAG_A_AA)
    return [v for v in found if v["impact"] in impact]


def summary(found: list[dict]) -> str:
    """Return `found` one rule a line: `rule-id (impact): target, target`."""
    return "\n".join(f"{v['id']} ({v['impact']}): {', '.join(v['targets'])}" for v in found)
