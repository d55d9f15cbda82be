from __future__ import annotations

from tests.support.testsite import ROBOTS_TXT
from webfetch.robots import RobotsRules, parse_robots, product_token

UA = "TollgateFetch/1.0 (+https://tollgate.invalid/bot)"
SITE = "http://127.0.0.1:8000"


def test_test_site_robots_disallow_the_private_tree_only():
    rules = parse_robots(ROBOTS_TXT, user_agent=UA)
    assert rules.allows(SITE + "/")
    assert rules.allows(SITE + "/a/1")
    assert rules.allows(SITE + "/private")  # the rule is /private/, a prefix
    assert not rules.allows(SITE + "/private/x")
    assert rules.crawl_delay_s is None


def test_group_naming_the_agent_replaces_the_star_group():
    rules = parse_robots(ROBOTS_TXT, user_agent="SlowBot/2.1")
    assert not rules.allows(SITE + "/")
    assert rules.crawl_delay_s == 2.0
    assert rules.allows(SITE + "/robots.txt")


def test_longest_match_decides_and_allow_wins_a_tie():
    text = "User-agent: *\nDisallow: /shop/\nAllow: /shop/public\nDisallow: /x\nAllow: /x\n"
    rules = parse_robots(text, user_agent=UA)
    assert not rules.allows(SITE + "/shop/cart")
    assert rules.allows(SITE + "/shop/public/item")
    assert rules.allows(SITE + "/x")


def test_wildcards_and_end_anchor_match():
    text = "User-agent: *\nDisallow: /*.pdf$\nDisallow: /*?session=\nDisallow: /tmp*/old\n"
    rules = parse_robots(text, user_agent=UA)
    assert not rules.allows(SITE + "/docs/a.pdf")
    assert rules.allows(SITE + "/docs/a.pdf?page=2")
    assert not rules.allows(SITE + "/list?session=abc")
    assert not rules.allows(SITE + "/tmp-2024/old/file")
    assert rules.allows(SITE + "/tmp/new")


def test_groups_of_one_agent_merge_and_agent_lines_share_a_group():
    text = (
        "User-agent: other\nUser-agent: tollgatefetch\nDisallow: /a\n\n"
        "User-agent: *\nDisallow: /\n\n"
        "User-agent: TollgateFetch\nDisallow: /b\nCrawl-delay: 1.5\n"
    )
    rules = parse_robots(text, user_agent=UA)
    assert (rules.allows(SITE + "/a"), rules.allows(SITE + "/b"), rules.allows(SITE + "/c")) == (
        False,
        False,
        True,
    )
    assert rules.crawl_delay_s == 1.5


def test_empty_disallow_comments_and_unknown_lines_change_nothing():
    text = "# hi\nSitemap: https://x/sitemap.xml\nUser-agent: *  # everyone\nDisallow:\nFoo: bar\n"
    rules = parse_robots(text, user_agent=UA)
    assert rules.allows(SITE + "/anything")


def test_percent_encoding_compares_one_way():
    rules = parse_robots("User-agent: *\nDisallow: /%7Euser/\n", user_agent=UA)
    assert not rules.allows(SITE + "/~user/page")
    rules = parse_robots("User-agent: *\nDisallow: /caf%C3%A9\n", user_agent=UA)
    assert not rules.allows(SITE + "/café")


def test_no_file_means_no_rules_and_the_fixed_verdicts():
    assert parse_robots("", user_agent=UA).allows(SITE + "/x")
    assert RobotsRules.allowing_all().allows(SITE + "/x")
    assert not RobotsRules.disallowing_all().allows(SITE + "/x")
    assert RobotsRules.disallowing_all().allows(SITE + "/robots.txt")


def test_product_token_is_the_agent_name_lowercased():
    assert product_token(UA) == "tollgatefetch"
    assert product_token("Googlebot") == "googlebot"
