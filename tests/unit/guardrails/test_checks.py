"""The check digits and registries behind the checksummed detectors."""

from __future__ import annotations

import pytest

from guardrails.checks import IBAN_LENGTHS, card_brand, iban_valid, luhn_valid, ssn_valid

# Examples published in the ISO 13616 / SWIFT IBAN registry.
REGISTRY_IBANS = (
    "DE89370400440532013000",
    "GB29NWBK60161331926819",
    "FR1420041010050500013M02606",
    "NL91ABNA0417164300",
    "BE68539007547034",
    "CH9300762011623852957",
    "ES9121000418450200051332",
    "IT60X0542811101000000123456",
    "NO9386011117947",
    "SE4550000000058398257466",
    "AT611904300234573201",
    "PL61109010140000071219812874",
    "MT84MALT011000012345MTLCAST001S",
    "SA0380000000608010167519",
    "BR1800360305000010009795493C1",
)


def test_the_registry_knows_89_countries():
    assert len(IBAN_LENGTHS) == 89
    assert (IBAN_LENGTHS["NO"], IBAN_LENGTHS["DE"], IBAN_LENGTHS["RU"]) == (15, 22, 33)


@pytest.mark.parametrize("iban", REGISTRY_IBANS)
def test_registry_examples_are_valid(iban):
    assert iban_valid(iban) is True


@pytest.mark.parametrize("iban", REGISTRY_IBANS)
def test_a_wrong_check_digit_is_invalid(iban):
    wrong = iban[:3] + str((int(iban[3]) + 1) % 10) + iban[4:]
    assert iban_valid(wrong) is False


def test_an_iban_of_the_wrong_length_or_unknown_country_is_invalid():
    assert iban_valid("DE8937040044053201300") is False  # 21 characters, DE has 22
    assert iban_valid("XX89370400440532013000") is False
    assert iban_valid("DEAB370400440532013000") is False


@pytest.mark.parametrize(
    ("number", "brand"),
    [
        ("4111111111111111", "visa"),
        ("4222222222222", "visa"),
        ("5555555555554444", "mastercard"),
        ("2223003122003222", "mastercard"),
        ("378282246310005", "amex"),
        ("6011111111111117", "discover"),
        ("3530111333300000", "jcb"),
        ("30569309025904", "diners"),
        ("6200000000000005", "unionpay"),
    ],
)
def test_test_numbers_of_every_brand_are_luhn_valid_cards(number, brand):
    assert luhn_valid(number) is True
    assert card_brand(number) == brand


def test_an_off_by_one_digit_fails_luhn():
    assert luhn_valid("4111111111111112") is False
    assert luhn_valid("5555555555554445") is False


def test_numbers_outside_issued_ranges_have_no_brand():
    assert card_brand("1234567812345670") is None  # Luhn-valid, no network starts with 1
    assert card_brand("4111111111111") == "visa"
    assert card_brand("41111111111111") is None  # Visa issues 13, 16 or 19 digits
    assert card_brand("2720999999999996") == "mastercard"
    assert card_brand("2721000000000004") is None


@pytest.mark.parametrize(
    ("area", "group", "serial", "valid"),
    [
        ("123", "45", "6789", True),
        ("000", "45", "6789", False),
        ("666", "45", "6789", False),
        ("900", "45", "6789", False),
        ("999", "45", "6789", False),
        ("123", "00", "6789", False),
        ("123", "45", "0000", False),
        ("899", "99", "9999", True),
    ],
)
def test_ssn_rules(area, group, serial, valid):
    assert ssn_valid(area, group, serial) is valid
